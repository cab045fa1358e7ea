// The page's state in its URL's hash (#q=…&state=…&plan=…): filters and the selected plan or agent, so a
// link restores what its sender saw. Only these keys ever go there: never a token, never a credential.

export const FILTER_KEYS = ["q", "controller", "agent", "state", "since"];
export const SELECT_KEYS = ["plan", "pane"];
const KEYS = [...FILTER_KEYS, ...SELECT_KEYS];

/** The state the hash holds now: {q, controller, agent, state, since, plan, pane} (absent keys omitted). */
export function readState() {
  const params = new URLSearchParams(location.hash.slice(1));
  const state = {};
  for (const key of KEYS) {
    const value = (params.get(key) || "").trim();
    if (value) state[key] = value;
  }
  return state;
}

/** Put `state` in the hash: `push` adds a history entry (a selection, so Back returns), else replaces. */
export function writeState(state, push = false) {
  const params = new URLSearchParams();
  for (const key of KEYS) if (state[key]) params.set(key, state[key]);
  const text = params.toString();
  const url = text ? `#${text}` : `${location.pathname}${location.search}`;
  if (url === location.hash || (!text && !location.hash)) return;
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

const UNITS = { m: 60e3, h: 3600e3, d: 86400e3 };

/** The earliest time `since` lets through (ms since the epoch): "15m", "2h", "7d" ago, or an ISO time. */
export function sinceTime(since, now = Date.now()) {
  if (!since) return null;
  const relative = /^(\d+)\s*([mhd])$/.exec(since);
  if (relative) return now - Number(relative[1]) * UNITS[relative[2]];
  const at = Date.parse(since);
  return isNaN(at) ? null : at;
}

/**
 * A test of one row against the filters: a row is {text, controller, agent, state, at}, each optional
 * (`text` lower case). A filter a row has no value for does not hide it, except `q`, which searches
 * its whole text, and a named controller or agent, which a row without one does not match.
 */
export function matcher(state) {
  const q = (state.q || "").toLowerCase();
  const controller = (state.controller || "").toLowerCase();
  const agent = (state.agent || "").toLowerCase();
  const wanted = state.state || "";
  const since = sinceTime(state.since);
  if (!q && !controller && !agent && !wanted && since === null) return () => true;
  return (row) => {
    if (q && !row.text.includes(q)) return false;
    if (controller && !(row.controller || "").toLowerCase().includes(controller)) return false;
    if (agent && !(row.agent || "").toLowerCase().includes(agent)) return false;
    if (wanted && row.state !== wanted) return false;
    if (since !== null && row.at && Date.parse(row.at) < since) return false;
    return true;
  };
}

// The dashboard's detail views, each drawn from one document of the API: a plan's timeline
// (GET /api/dashboard/plans/ID/timeline), an agent's detail (its row of GET /api/agents, its receipts,
// the live progress the stream carries), and one item of what needs a person.

import { dash, dollars, duration, el, spent } from "./dom.js";

// --- what needs a person ----------------------------------------------------------------------------------

const KIND_LABEL = {
  decision: "decision",
  agent_blocked: "blocked agent",
  receipt_ambiguous: "ambiguous receipt",
  controller_expired: "expired controller",
  runner_stale: "stale runner",
  plan_paused: "paused plan",
};

/** A command to copy: the text itself (selectable) and a button that copies it. */
export function command(text) {
  const code = el("code", { class: "command", text });
  const button = el("button", { type: "button", class: "copy", text: "copy", "aria-label": "copy the command" });
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "copied";
    } catch {
      // no clipboard here (an insecure origin, a refused permission): select it for the reader to copy
      const range = document.createRange();
      range.selectNodeContents(code);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      button.textContent = "selected";
    }
  });
  return el("div", { class: "settle" }, code, button);
}

/** One item: its kind, what it is, since when, and what settles it (`form`: the decide form, or null). */
export function attentionItem(item, form) {
  const node = el("div", { class: `decision kind-${item.kind}`, data: { decision: item.id, kind: item.kind } },
    el("div", {}, el("span", { class: `badge kind kind-${item.kind}`, text: KIND_LABEL[item.kind] || item.kind }), " ",
      el("code", { text: item.id }), item.since ? el("span", { class: "muted", text: ` since ${item.since}` }) : ""),
    el("div", { class: "title", text: item.title || "" }));
  if (item.command) node.append(command(item.command));
  if (form) node.append(form);
  return node;
}

// --- a plan's timeline ------------------------------------------------------------------------------------

const STEPS_DRAWN = 500; // a plan of 10,000 steps draws the first 500 the filters let through

/** The plan's steps as a waterfall: one track per step, one bar per attempt, its wait hatched; only the
 * steps `match` lets through ({text, state}), at most STEPS_DRAWN of them (the scale is the whole plan's). */
export function timeline(doc, match = () => true, now = Date.now()) {
  const attempts = doc.steps.flatMap((s) => s.attempts);
  const startOf = (a) => Date.parse(a.started_at);
  const endOf = (a) => (a.ended_at ? Date.parse(a.ended_at) : now);
  let t0 = Infinity, t1 = -Infinity; // (a loop: spreading 10,000 values into Math.min may overflow the stack)
  for (const a of attempts) {
    if (!a.started_at) continue;
    t0 = Math.min(t0, startOf(a));
    t1 = Math.max(t1, endOf(a));
  }
  if (t0 === Infinity) t0 = t1 = now;
  const total = Math.max(t1 - t0, 1);
  const pct = (t) => `${((t - t0) / total) * 100}%`;
  const width = (a, b) => `${Math.max(((b - a) / total) * 100, 0.4)}%`;
  const grid = el("div", { class: "waterfall timeline", role: "table", "aria-label": `timeline of ${doc.plan}` },
    el("div", { class: "muted", text: "step" }), el("div", { class: "muted", text: `0 → ${duration(total / 1000)}` }),
    el("div", { class: "muted", text: "state · time · spend" }));
  const matched = doc.steps.filter((s) => match({ text: `${s.id} ${s.do || ""} ${s.state}`.toLowerCase(), state: s.state }));
  for (const step of matched.slice(0, STEPS_DRAWN)) {
    const track = el("div", { class: "track" });
    for (const a of step.attempts) {
      if (!a.started_at) continue;
      const bar = el("div", { class: `bar step-${a.state}`, title: `${step.id} attempt ${a.attempt}: ${a.state}`,
        data: { attempt: String(a.attempt) } });
      bar.style.left = pct(startOf(a));
      bar.style.width = width(startOf(a), endOf(a));
      track.append(bar);
      if (a.wait && a.wait.since) {
        const until = a.wait.until ? Date.parse(a.wait.until) : endOf(a);
        const wait = el("div", { class: "wait", title: `waited on ${a.wait.kind}` });
        wait.style.left = pct(Date.parse(a.wait.since));
        wait.style.width = width(Date.parse(a.wait.since), until);
        track.append(wait);
      }
      if (a.decision && a.decision.at) {
        const mark = el("div", { class: "mark", text: "◆",
          title: `${a.decision.approve ? "approved" : "rejected"} by ${a.decision.actor}: ${a.decision.reason}` });
        mark.style.left = pct(Date.parse(a.decision.at));
        track.append(mark);
      }
    }
    const last = step.attempts[step.attempts.length - 1];
    // a running or waiting attempt counts until now
    const seconds = step.attempts.reduce((sum, a) => sum + (typeof a.seconds === "number" ? a.seconds
      : a.started_at ? (endOf(a) - startOf(a)) / 1000 : 0), 0);
    const facts = [step.state, step.retries ? `${step.retries} ${step.retries === 1 ? "retry" : "retries"}` : "",
      step.attempts.length ? duration(seconds) : dash, spent(step.tokens, step.cost_usd),
      last && last.error ? `error ${last.error}` : "", last && last.wait ? `waits on ${last.wait.kind}` : ""];
    grid.append(el("div", { class: "mono", text: step.id, data: { step: step.id } }), track,
      el("div", { class: `state state-${step.state}`, data: { facts: step.id }, text: facts.filter(Boolean).join(" · ") }));
  }
  if (!matched.length) grid.append(el("div", { class: "muted", text: doc.steps.length ? "no step matches the filters" : "no step" }));
  if (matched.length > STEPS_DRAWN) {
    grid.append(el("div", { class: "muted more", text: `and ${matched.length - STEPS_DRAWN} more steps match: narrow the filters` }));
  }
  const spentText = doc.tokens === null ? "spend: —" : `spend: ${doc.tokens} tok · ${dollars(doc.cost_usd)} · ${doc.turns} turns`;
  const head = el("p", { class: "muted" },
    `${doc.recipe || ""} · ${doc.state} · ${doc.steps.length} steps · started ${doc.started_at || dash}`
    + ` · ${doc.ended_at ? `ended ${doc.ended_at}` : "not ended"} · ${spentText}`);
  return el("div", { class: "plan-timeline", data: { plan: doc.plan } }, head, grid);
}

// --- an agent's detail ------------------------------------------------------------------------------------

/** The agent's lease, conversation, spend, live progress (every line of its run) and receipts. */
export function agentDetail(agent, receipts, progress, spendText) {
  const facts = [["agent", agent.name || agent.pane_id], ["pane", agent.pane_id], ["kind", agent.kind],
    ["status", agent.status], ["cursor", agent.seq ?? dash], ["lease", agent.lease ? `${agent.lease} (${agent.lease_state})` : dash],
    ["conversation id", agent.session_id || dash], ["spend / budget", spendText], ["directory", agent.cwd || dash]];
  const dl = el("dl", { class: "facts" });
  for (const [key, value] of facts) dl.append(el("dt", { text: key }), el("dd", { class: "mono", data: { fact: key }, text: String(value) }));
  const lines = progress ? progress.lines : [];
  const run = el("div", { class: "progress", data: { running: String(Boolean(progress && progress.running)) } },
    el("h3", { text: progress ? `run ${progress.run}: ${progress.running ? "running" : "ended"} · ${lines.length} line(s)` : "no run seen since this page opened" }));
  const list = el("ol", { class: "mono progress-lines" });
  for (const line of lines) list.append(el("li", { text: line }));
  run.append(list);
  const table = el("table", {}, el("thead", {}, el("tr", {}, ...["receipt", "state", "reserved", "tokens · cost", "tool calls", "file changes"].map((t) => el("th", { text: t })))));
  const body = el("tbody", { class: "agent-receipts" });
  for (const r of receipts) {
    const usage = r.usage ? Object.values(r.usage).filter((v) => typeof v === "number").reduce((a, b) => a + b, 0) : null;
    body.append(el("tr", { data: { key: r.token || "" } }, el("td", { class: "mono ident", text: r.token || "" }),
      el("td", { class: `state state-${r.state}`, text: r.state }), el("td", { class: "mono", text: r.reserved_at || dash }),
      el("td", { class: "mono", text: spent(usage, r.cost_usd) }),
      el("td", { text: Array.isArray(r.tool_calls) ? String(r.tool_calls.length) : r.tool_calls ?? dash }),
      el("td", { text: Array.isArray(r.file_changes) ? String(r.file_changes.length) : r.file_changes ?? dash })));
  }
  if (!receipts.length) body.append(el("tr", {}, el("td", { class: "empty", colspan: "6", text: "no receipt for this agent" })));
  table.append(body);
  return el("div", { class: "agent-detail", data: { pane: agent.pane_id } }, dl, run, el("h3", { text: "receipts" }), table);
}

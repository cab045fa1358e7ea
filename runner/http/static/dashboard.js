// corral's live dashboard: read-only panels over the REST API, refreshed on every event of the stream
// (debounced), countdowns every second. The one action, deciding a pending decision, appears only once
// the page has a bearer token (pasted by the user, kept in sessionStorage).

import { ApiError, get, post, setToken, token, whenUnauthorized } from "./api.js";
import { $, el } from "./dom.js";
import { FILTER_KEYS, matcher, readState, writeState } from "./filters.js";
import { draw } from "./machine.js";
import { EventSearch } from "./search.js";
import { follow } from "./stream.js";
import { agentDetail, attentionItem, timeline } from "./views.js";

const EVENTS_SHOWN = 200;
const PLANS_DRAWN = 8;
const ROWS_SHOWN = 500; // a table's most rows drawn at once: past it, a line says how many more match
const DEBOUNCE_MS = 100;

const stateCell = (state) => el("td", { class: `state state-${state}`, text: state ?? "" });

// --- filtered tables --------------------------------------------------------------------------------------
// Each table keeps its last listing; a filter change redraws from it without asking the server, and a
// row's element is kept while its data is unchanged, so filtering 1,000 rows builds none of them again.

let view = readState(); // the filters and selections, as the URL's hash holds them
const tables = new Map(); // tbody id -> {items, columns, empty, built: Map(key -> {sig, tr})}

function rows(tbody, items, columns, empty, key) {
  const known = tables.get(tbody.id) || { built: new Map() };
  tables.set(tbody.id, { ...known, items, columns, empty, key });
  drawTable(tbody.id);
}

function drawTable(id) {
  const tbody = $(id);
  const { items, columns, empty, built } = tables.get(id);
  if (!items.length) {
    tbody.replaceChildren(el("tr", {}, el("td", { class: "empty", colspan: String(columns), text: empty })));
    tbody.dataset.matched = "0";
    return;
  }
  const match = matcher(view);
  const matched = items.filter((item) => !item.facets || match(item.facets));
  const next = new Map();
  const shown = matched.slice(0, ROWS_SHOWN).map((item) => {
    const old = built.get(item.id);
    const sig = item.sig ?? null;
    if (old && sig !== null && old.sig === sig) {
      next.set(item.id, old);
      return old.tr;
    }
    const tr = el("tr", { data: { key: item.id } });
    tr.append(...(typeof item.cells === "function" ? item.cells() : item.cells));
    next.set(item.id, { sig, tr });
    return tr;
  });
  for (const [k, v] of built) if (!next.has(k) && items.some((i) => i.id === k)) next.set(k, v);
  tables.get(id).built = next;
  if (!matched.length) shown.push(el("tr", {}, el("td", { class: "empty", colspan: String(columns), text: "nothing matches the filters" })));
  if (matched.length > ROWS_SHOWN) {
    shown.push(el("tr", {}, el("td", { class: "more muted", colspan: String(columns),
      text: `and ${matched.length - ROWS_SHOWN} more match: narrow the filters` })));
  }
  tbody.replaceChildren(...shown);
  tbody.dataset.matched = String(matched.length);
}

// What went wrong, by where it came from: a refresh that ends clears its own failure only, never what an
// action of the person's (a decision refused on the page, say) has just told them.
const problems = { refresh: "", action: "" };

function problem(text, source = "action") {
  problems[source] = text || "";
  const shown = [problems.action, problems.refresh].filter(Boolean).join(" · ");
  const box = $("problem");
  box.hidden = !shown;
  box.textContent = shown;
}

// --- countdowns -------------------------------------------------------------------------------------------

function countdown(span) {
  const left = Math.round((Date.parse(span.dataset.expires) - Date.now()) / 1000);
  span.textContent = left >= 0 ? `in ${left} s` : `expired ${-left} s ago`;
  span.classList.toggle("expired", left < 0);
}

function tick() {
  for (const span of document.querySelectorAll("[data-expires]")) countdown(span);
}

function expiry(at) {
  const span = el("span", { class: "countdown", title: at, data: { expires: at } });
  countdown(span);
  return span;
}

// --- panels -----------------------------------------------------------------------------------------------

async function controllers() {
  const doc = await get("/api/controllers?all=false");
  rows($("controllers"), (doc.leases || []).map((l) => ({
    id: l.controller_id,
    sig: JSON.stringify(l),
    facets: { text: `${l.controller_id} ${l.holder} ${l.state}`.toLowerCase(), controller: l.controller_id,
      state: l.expired ? "expired" : l.state },
    cells: () => [el("td", { class: "mono", text: l.controller_id }), el("td", { text: l.holder }),
      el("td", { text: l.generation }), stateCell(l.expired ? "expired" : l.state),
      el("td", {}, l.expires_at ? expiry(l.expires_at) : "")],
  })), 5, "no controller lease is held");
}

// What a driven agent spent against its lease's budget: "120 tok / 1000 · $0.25 / $1 · 1 turn / 5".
function spendText(spend, budget) {
  if (!spend && !(budget && Object.keys(budget).length)) return "—";
  const s = spend || {}, b = budget || {};
  const of = (limit, show) => (b[limit] !== undefined ? ` / ${show(b[limit])}` : "");
  const dollars = (v) => `$${Number(v || 0).toPrecision(3).replace(/\.?0+$/, "")}`;
  const turns = s.turns ?? 0;
  return `${s.tokens ?? 0} tok${of("budget_tokens", String)} · ${dollars(s.cost_usd)}${of("budget_usd", dollars)}`
    + ` · ${turns} turn${turns === 1 ? "" : "s"}${of("max_turns", String)}`;
}

// Live progress (agent.progress events, not durable): per pane, the latest run's tool calls and file
// changes, kept by index so an event seen twice (a reconnect's snapshot) changes nothing.
const ACTIVITY_SHOWN = 3;
const activity = new Map(); // pane id -> {run, running, lines}

function onProgress(update) {
  if (!update || !update.pane_id) return;
  let known = activity.get(update.pane_id);
  if (!known || known.run !== update.run) known = { run: update.run, running: true, lines: [] };
  known.lines.splice(update.start, known.lines.length - update.start, ...(update.lines || []));
  known.running = Boolean(update.running);
  known.total = update.total;
  activity.set(update.pane_id, known);
  const row = $("agents").querySelector(`tr[data-key="${CSS.escape(update.pane_id)}"]`);
  if (row) row.querySelector("td.activity")?.replaceWith(activityCell(update.pane_id));
  if (view.pane === update.pane_id) agentPanel();
  if (!known.running) schedule(); // the run ended: its spend and status changed
}

function activityCell(paneId) {
  const known = activity.get(paneId);
  const cell = el("td", { class: "activity mono", data: { pane: paneId } });
  if (!known) {
    cell.textContent = "—";
    return cell;
  }
  cell.dataset.run = String(known.run);
  cell.dataset.running = String(known.running);
  const shown = known.lines.slice(-ACTIVITY_SHOWN);
  if (!shown.length) cell.append(el("div", { class: "muted", text: known.running ? "working…" : "no tool call" }));
  for (const line of shown) cell.append(el("div", { class: "line", text: line }));
  if (known.lines.length > shown.length) cell.prepend(el("div", { class: "muted", text: `… ${known.lines.length - shown.length} more` }));
  return cell;
}

let agentRows = []; // the last listing of /api/agents: the agent detail reads its agent there
let receiptRows = []; // the last listing of /api/receipts?all=true

function selectLink(text, key, value, props = {}) {
  const link = el("a", { href: `#${new URLSearchParams({ ...selection(), [key]: value })}`, ...props, text });
  link.addEventListener("click", (event) => {
    event.preventDefault();
    select(key, value);
  });
  return link;
}

async function agents() {
  const doc = await get("/api/agents");
  agentRows = doc.agents || [];
  rows($("agents"), agentRows.map((a) => ({
    id: a.pane_id,
    sig: JSON.stringify(a),
    facets: { text: `${a.name} ${a.pane_id} ${a.kind} ${a.status} ${a.lease} ${a.session_id}`.toLowerCase(),
      agent: `${a.name || ""} ${a.pane_id}`, state: a.status, controller: a.controller_id || a.controller || "" },
    cells: () => [el("td", { class: "mono", title: a.cwd }, selectLink(a.name || a.pane_id, "pane", a.pane_id, { class: "agent-link" })),
      el("td", { text: a.kind }), stateCell(a.status), el("td", { class: "mono", text: a.seq ?? "" }),
      el("td", { class: "mono ident", text: a.lease ? `${a.lease} (${a.lease_state})` : "—" }),
      el("td", { class: "mono session", text: a.session_id || "—" }),
      el("td", { class: "mono spend", text: spendText(a.spend, a.budget) }),
      activityCell(a.pane_id)],
  })), 8, "no agent on this host");
}

async function receipts() {
  const doc = await get("/api/receipts?all=true");
  receiptRows = doc.receipts || [];
  const newest = [...receiptRows].reverse();
  rows($("receipts"), newest.map((r) => ({
    id: r.token || r.id,
    sig: JSON.stringify([r.state, r.version]),
    facets: { text: `${r.token} ${r.name} ${r.pane_id} ${r.state} ${r.controller_id}`.toLowerCase(),
      controller: r.controller_id, agent: `${r.name || ""} ${r.pane_id || ""}`, state: r.state, at: r.reserved_at },
    cells: () => [el("td", { class: "mono ident", text: r.token || r.id }), el("td", { text: r.name || r.target || r.pane_id || "" }),
      stateCell(r.state), el("td", { class: "mono", text: r.controller_id || "" })],
  })), 4, "no receipt");
}

const scopes = (list) => (Array.isArray(list) && list.length ? list.join(", ") : "—");

async function writers() {
  const doc = await get("/api/writers");
  rows($("writers"), (doc.writers || []).map((w) => ({
    id: w.id,
    sig: JSON.stringify(w),
    facets: { text: `${w.name} ${w.id} ${w.state} ${scopes(w.owned_scopes)}`.toLowerCase(), agent: w.name,
      controller: w.controller_id, state: w.state },
    cells: () => [el("td", { class: "mono", text: w.name || w.id, title: w.worktree || w.cwd }), stateCell(w.state),
      el("td", { class: "mono", text: scopes(w.owned_scopes) }), el("td", { class: "mono", text: scopes(w.locked_scopes) })],
  })), 4, "no writer lane");
}


function decideForm(id) {
  const reason = el("input", { type: "text", placeholder: "reason (recorded)", "aria-label": `reason for ${id}` });
  const form = el("form", { class: "decide", data: { decision: id } }, reason);
  for (const choice of ["approve", "reject"]) {
    const button = el("button", { type: "submit", value: choice, text: choice });
    form.append(button);
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const choice = event.submitter ? event.submitter.value : "approve";
    if (!reason.value.trim()) {
      problem("a decision needs a reason: it is recorded with the deciding actor");
      return;
    }
    try {
      await post(`/api/decisions/${encodeURIComponent(id)}`, { decision: choice, reason: reason.value.trim() });
      problem("");
    } catch (error) {
      problem(`deciding ${id}: ${error.message} [${error.code}]`);
    }
    schedule();
  });
  return form;
}

// What needs a person, first on the page: every item with the command that settles it, and the decide
// form (POST /api/decisions/ID, the page's one action) only for a plan's decision and only with a token.
async function attention() {
  const box = $("decisions");
  const doc = await get("/api/dashboard/attention");
  const listed = doc.items || [];
  $("attention-count").textContent = listed.length ? `(${listed.length})` : "";
  if (!listed.length) {
    box.replaceChildren(el("p", { class: "muted", text: "nothing waits on a person" }));
    return;
  }
  // An item whose decision has not changed is kept as it is: a refresh (any event brings one) must
  // never wipe a reason someone is typing, or move the focus out of it.
  const kept = new Map([...box.querySelectorAll(":scope > .decision")].map((node) => [node.dataset.decision, node]));
  const items = listed.map((item) => {
    const signature = JSON.stringify([item, Boolean(token())]);
    const old = kept.get(item.id);
    if (old && old.dataset.signature === signature) return old;
    const node = attentionItem(item, item.decision && token() ? decideForm(item.decision) : null);
    node.dataset.signature = signature;
    return node;
  });
  const same = items.length === box.children.length && items.every((item, i) => box.children[i] === item);
  if (!same) box.replaceChildren(...items);
}

function waterfall(plan) {
  // The plan's steps in run order, those not run yet included (state pending).
  const steps = (plan.steps || []).map((s) => [s.id, s]);
  const now = Date.now();
  // A step record's `at` is when it was last written: its start while it runs, its end once it has
  // `seconds` (then it started `seconds` earlier). A running step's bar reaches to now.
  const spans = steps.map(([, s]) => {
    const at = s.at ? Date.parse(s.at) : NaN;
    if (isNaN(at)) return { start: NaN, end: NaN };
    if (typeof s.seconds === "number") return { start: at - s.seconds * 1000, end: at };
    return { start: at, end: Math.max(now, at) };
  });
  const known = spans.filter((s) => !isNaN(s.start));
  const t0 = known.length ? Math.min(...known.map((s) => s.start)) : now;
  const t1 = known.length ? Math.max(...known.map((s) => s.end)) : now;
  const total = Math.max(t1 - t0, 1);
  const grid = el("div", { class: "waterfall", role: "table", "aria-label": `steps of ${plan.plan}` });
  steps.forEach(([id, s], i) => {
    const span = spans[i];
    const bar = el("div", { class: `bar step-${s.state}`, title: `${id}: ${s.state}` });
    if (!isNaN(span.start)) {
      bar.style.left = `${((span.start - t0) / total) * 100}%`;
      bar.style.width = `${Math.max(((span.end - span.start) / total) * 100, 0.5)}%`;
    } else {
      bar.style.left = "0";
      bar.style.width = "0";
    }
    const seconds = typeof s.seconds === "number" ? `${s.seconds.toFixed(1)} s` : "";
    grid.append(el("div", { class: "mono", text: id, data: { step: id } }), el("div", { class: "track" }, bar),
      el("div", { class: `state state-${s.state}`, text: `${s.state}${s.attempt > 1 ? ` ×${s.attempt}` : ""} ${seconds}` }));
  });
  if (!steps.length) grid.append(el("div", { class: "muted", text: "no step has run yet" }));
  return grid;
}

// The runner's lease on a plan (issue 24): held and live, expired (any runner may take it), or absent.
function runnerNote(runner) {
  if (runner.status === "absent") return " · no runner";
  return ` · runner ${runner.status}: pid ${runner.pid} on ${runner.host}, lease until ${runner.expires_at || "-"}`;
}

const planFacets = (p) => ({ text: `${p.plan} ${p.recipe} ${p.state} ${p.controller}`.toLowerCase(),
  controller: p.controller, state: p.state });

async function plans() {
  const doc = await get("/api/plans?all=true");
  const listed = doc.plans || [];
  rows($("plan-list"), [...listed].reverse().map((p) => ({
    id: p.plan,
    sig: JSON.stringify([p.state, p.steps, p.paused_reason]),
    facets: planFacets(p),
    cells: () => [el("td", { class: "mono" }, selectLink(p.plan, "plan", p.plan, { class: "plan-link" })),
      el("td", { text: p.recipe || "" }), stateCell(p.state), el("td", { class: "mono", text: p.controller || "" }),
      el("td", { text: p.paused_reason || (p.failure && p.failure.code) || "" })],
  })), 5, "no plan");
  // Drawn: the first plans not ended (succeeded or cancelled) that the filters let through.
  const match = matcher(view);
  const live = listed.filter((p) => !["succeeded", "cancelled"].includes(p.state) && match(planFacets(p)));
  const box = $("plans");
  if (!live.length) {
    box.replaceChildren(el("p", { class: "muted", text: "no plan is running" }));
    return;
  }
  const shown = await Promise.all(live.slice(0, PLANS_DRAWN).map((p) => get(`/api/plans/${encodeURIComponent(p.plan)}`)));
  box.replaceChildren(...shown.map((plan) => el("div", { class: "plan", data: { plan: plan.plan } },
    el("h3", {}, el("code", {}, selectLink(plan.plan, "plan", plan.plan)), " ", el("span", { class: "muted", text: plan.recipe || "" }), " ",
      el("span", { class: `state state-${plan.state}`, text: plan.state }),
      plan.paused_reason ? el("span", { class: "muted", text: ` — ${plan.paused_reason}` }) : "",
      plan.runner ? el("span", { class: `muted runner runner-${plan.runner.status}`, text: runnerNote(plan.runner) }) : ""),
    waterfall(plan))));
  if (live.length > PLANS_DRAWN) box.append(el("p", { class: "muted", text: `and ${live.length - PLANS_DRAWN} more` }));
}

// --- the selected plan's timeline, the selected agent's detail ---------------------------------------------

const ENDED = ["succeeded", "cancelled"]; // (a failed plan may be retried)
let timelineStale = true; // the selected plan had an event since its timeline was read
let timelineDoc = null; // the selected plan's last timeline: a filter change redraws it without a request

function drawTimeline() {
  if (timelineDoc && view.plan === timelineDoc.plan) {
    // only the text and the state: a step has no controller or agent of its own to filter by
    $("timeline").replaceChildren(timeline(timelineDoc, matcher({ q: view.q, state: view.state })));
  }
}

async function planTimeline() {
  const panel = $("panel-timeline");
  panel.hidden = !view.plan;
  if (!view.plan) return;
  $("timeline-title").textContent = view.plan;
  // Asked again only when that plan's instance had an event since (a plan of 10,000 steps is a large
  // answer: a burst of other events must not fetch it again and again), and never once it has ended.
  if (timelineDoc && timelineDoc.plan === view.plan && (!timelineStale || ENDED.includes(timelineDoc.state))) return;
  try {
    timelineStale = false; // (before the answer: an event while it is on its way marks it stale again)
    timelineDoc = await get(`/api/dashboard/plans/${encodeURIComponent(view.plan)}/timeline`);
    drawTimeline();
  } catch (error) {
    timelineStale = true; // asked again by the next refresh
    if (!(error instanceof ApiError) || error.status === 401) throw error;
    $("timeline").replaceChildren(el("p", { class: "muted", text: `${error.message} [${error.code}]` }));
  }
}

function agentPanel() {
  const panel = $("panel-agent");
  panel.hidden = !view.pane;
  if (!view.pane) return;
  const agent = agentRows.find((a) => a.pane_id === view.pane);
  $("agent-title").textContent = agent ? agent.name || agent.pane_id : view.pane;
  if (!agent) {
    $("agent").replaceChildren(el("p", { class: "muted", text: `no agent ${view.pane} on this host now` }));
    return;
  }
  const mine = receiptRows.filter((r) => r.pane_id === agent.pane_id).reverse();
  $("agent").replaceChildren(agentDetail(agent, mine, activity.get(agent.pane_id), spendText(agent.spend, agent.budget)));
}

// --- machines ---------------------------------------------------------------------------------------------

const machines = new Map(); // name -> {figure, select, box, instances: string[], dirty: bool}

function chosenInstance(m) {
  return m.select.value === "" ? m.instances[m.instances.length - 1] || "" : m.select.value;
}

async function drawMachine(name) {
  const m = machines.get(name);
  m.dirty = false;
  try {
    const doc = await draw(m.box, name, chosenInstance(m));
    m.caption.textContent = doc.instance ? `${doc.instance} in ${doc.state}` : "";
  } catch (error) {
    m.box.replaceChildren(el("p", { class: "muted", text: `cannot draw: ${error.message}` }));
  }
}

const seen = new Map(); // machine name -> instance ids in the order the stream showed them

function instanceSeen(machine, instance) {
  if (!machine || !instance) return;
  if (!seen.has(machine)) seen.set(machine, []);
  const ids = seen.get(machine);
  if (!ids.includes(instance)) ids.push(instance);
  const m = machines.get(machine);
  if (!m) return; // drawn once the machines are listed
  if (!m.instances.includes(instance)) {
    m.instances.push(instance);
    m.select.append(el("option", { value: instance, text: instance }));
  }
  if (m.select.value === "" || m.select.value === instance) m.dirty = true;
}

async function loadMachines() {
  const doc = await get("/api/machines");
  const box = $("machines");
  box.replaceChildren();
  for (const machine of doc.machines || []) {
    if (machine.error) continue;
    const select = el("select", { "aria-label": `instance of ${machine.name}` },
      el("option", { value: "", text: "latest instance" }));
    const caption = el("span", { class: "muted" });
    const drawing = el("div", { class: "drawing" });
    const figure = el("figure", { class: "machine", data: { machine: machine.name } },
      el("figcaption", {}, el("strong", { text: machine.name }), select, caption), drawing);
    const instances = [...(seen.get(machine.name) || [])];
    for (const id of instances) select.append(el("option", { value: id, text: id }));
    machines.set(machine.name, { figure, select, box: drawing, caption, instances, dirty: true });
    select.addEventListener("change", () => drawMachine(machine.name));
    box.append(figure);
  }
}

// --- events -----------------------------------------------------------------------------------------------

let eventCount = 0;

function showGap(data) {
  const text = data.reason === "epoch"
    ? `Gap: the cursor ${data.epoch}:${data.since} is of another store; the stream restarted at this store's floor #${data.floor}.`
    : `Gap: events after #${data.since} up to the retention floor #${data.floor} were pruned; the stream resumed at the floor.`;
  $("gap-text").textContent = text;
  const banner = $("gap");
  banner.dataset.floor = String(data.floor);
  banner.dataset.reason = String(data.reason);
  banner.hidden = false;
}

function onEvent(event) {
  document.body.dataset.lastEvent = event.id;
  if (event.type === "gap") {
    showGap(event.data || {});
    schedule();
    return;
  }
  if (event.type === "agent.progress") {
    onProgress(event.data);
    return;
  }
  const e = event.data || {};
  if (typeof e !== "object") return;
  eventCount += 1;
  $("event-count").textContent = `(${eventCount} received)`;
  const tbody = $("events");
  const tr = el("tr", { class: "fresh", data: { seq: String(e.seq), instance: e.instance, trigger: e.trigger } },
    el("td", { class: "mono", text: e.seq }), el("td", { class: "mono", text: e.at || "" }),
    el("td", { class: "mono", text: e.instance || "" }), el("td", { text: e.trigger || event.type }),
    el("td", { text: `${e.from ?? ""} → ${e.to ?? ""}` }), el("td", { class: "mono", text: e.actor || "" }));
  for (const old of tbody.querySelectorAll("tr.fresh")) old.classList.remove("fresh");
  tbody.prepend(tr);
  while (tbody.rows.length > EVENTS_SHOWN) tbody.deleteRow(-1);
  instanceSeen(e.machine, e.instance);
  search.add(e, (ev) => ev.instance === `plan/${view.plan}`);
  if (view.plan && e.instance === `plan/${view.plan}`) timelineStale = true;
  schedule();
}

function onState(state) {
  const badge = $("connection");
  if (state === "unauthorized") {
    $("auth-needed").hidden = false;
    state = "reconnecting";
  }
  badge.dataset.state = state;
  badge.textContent = state === "live" ? "live" : state;
}

// --- refresh ----------------------------------------------------------------------------------------------

let timer = null;
let running = null;
let again = false;
let machinesLoaded = false;

async function refresh() {
  if (!$("store").textContent) {
    get("/api/ping").then((doc) => {
      $("store").textContent = `v${doc.version} · store ${doc.store_id}`;
    }).catch(() => {});
  }
  // The machines' list is asked beside the panels, not before them (its first answer is slow: the
  // server loads every definition), and awaited before their drawings.
  const machinesListed = machinesLoaded ? null : loadMachines().then(() => {
    machinesLoaded = true;
  }, () => {
    // unauthorized or unreachable: the next refresh tries again
  });
  const panels = [attention, controllers, agents, receipts, writers, plans, planTimeline];
  // The event search (up to 20,000 events) loads once the rest is drawn: rendered incrementally, it
  // never holds up what needs a person.
  if (document.body.dataset.firstRender && searchFor !== (view.plan || null)) panels.push(loadSearch);
  const results = await Promise.allSettled(panels.map((panel) => panel()));
  agentPanel();
  if (search.dirty) search.show();
  if (!document.body.dataset.firstRender && results.every((r) => r.status === "fulfilled")) {
    // from navigation start to every data panel drawn once, the machines' drawings aside (they come
    // after, one by one); bench/dashboard.py reads it
    void document.body.offsetHeight;
    document.body.dataset.firstRender = performance.now().toFixed(1);
  }
  if (searchFor !== (view.plan || null)) again = true; // its first load: the refresh right after this one
  const failed = results.filter((r) => r.status === "rejected" && r.reason.status !== 401);
  problem(failed.length ? `could not refresh: ${failed.map((r) => r.reason.message).join("; ")}` : "", "refresh");
  if (results.every((r) => r.status === "fulfilled")) $("auth-needed").hidden = true;
  await machinesListed;
  await Promise.allSettled([...machines].filter(([, m]) => m.dirty).map(([name]) => drawMachine(name)));
  document.body.dataset.refreshed = String(Date.now());
  tick();
}

// --- the event search -------------------------------------------------------------------------------------

let search = null;
let searchFor; // the plan whose events the search holds (null: the whole log), undefined: not loaded

async function loadSearch() {
  const plan = view.plan || null;
  await search.load(plan);
  searchFor = plan; // only once loaded: a refused load (no token yet) is asked again by the next refresh
  search.filter(filtersOf(view));
  document.body.dataset.searchLoaded = performance.now().toFixed(1);
}

// --- filters and selections: the URL's hash ---------------------------------------------------------------

const filtersOf = (state) => Object.fromEntries(FILTER_KEYS.filter((k) => state[k]).map((k) => [k, state[k]]));
const selection = () => Object.fromEntries(Object.entries(view).filter(([k]) => !FILTER_KEYS.includes(k)));

function showFilters() {
  for (const key of FILTER_KEYS) {
    const input = $(`filter-${key}`);
    if (input.value !== (view[key] || "")) input.value = view[key] || "";
  }
}

/** Redraw what the filters govern from what the page holds (no request), and time it. */
function applyFilters() {
  const t0 = performance.now();
  for (const id of tables.keys()) drawTable(id);
  drawTimeline();
  search.filter(filtersOf(view));
  void document.body.offsetHeight; // the layout is part of the cost a reader waits for
  document.body.dataset.filterMs = (performance.now() - t0).toFixed(1);
  document.body.dataset.filtered = String(Number(document.body.dataset.filtered || 0) + 1);
}

function onFilterInput() {
  const next = { ...selection() };
  for (const key of FILTER_KEYS) {
    const value = $(`filter-${key}`).value.trim();
    if (value) next[key] = value;
  }
  view = next;
  writeState(view);
  applyFilters();
  schedule(); // the drawn plans follow the filters too
}

/** Select a plan or an agent (a history entry, so Back returns), or clear it (value ""). */
function select(key, value) {
  if (key === "plan") timelineStale = true;
  view = { ...view, [key]: value || undefined };
  if (!value) delete view[key];
  writeState(view, true);
  planTimeline().catch(() => {});
  agentPanel();
  schedule();
}

function onHashChange() {
  timelineStale = true;
  view = readState();
  showFilters();
  applyFilters();
  agentPanel();
  schedule();
}

/** Refresh soon: many events in a burst make one refresh; one running makes one more after it.
 * `delay`: how soon (the page's first refresh waits for nothing). */
function schedule(delay = DEBOUNCE_MS) {
  if (running) {
    again = true;
    return;
  }
  if (timer !== null) return;
  timer = setTimeout(async () => {
    timer = null;
    running = refresh();
    try {
      await running;
    } finally {
      running = null;
      if (again) {
        again = false;
        schedule();
      }
    }
  }, delay);
}

// --- the token --------------------------------------------------------------------------------------------

function showToken() {
  $("token-forget").hidden = !token();
  $("token-input").placeholder = token() ? "a token is set (paste to replace)" : "paste the server's token";
}

function start() {
  whenUnauthorized(() => {
    $("auth-needed").hidden = false;
  });
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token-input").value.trim();
    $("token-input").value = "";
    if (value) setToken(value);
    showToken();
    schedule();
  });
  $("token-forget").addEventListener("click", () => {
    setToken("");
    showToken();
    schedule();
  });
  $("gap-dismiss").addEventListener("click", () => {
    $("gap").hidden = true;
  });
  search = new EventSearch($("search-list"), $("search-count"));
  for (const key of FILTER_KEYS) $(`filter-${key}`).addEventListener("input", onFilterInput);
  $("filters").addEventListener("submit", (event) => event.preventDefault());
  $("filters-clear").addEventListener("click", () => {
    for (const key of FILTER_KEYS) $(`filter-${key}`).value = "";
    onFilterInput();
  });
  $("timeline-close").addEventListener("click", () => select("plan", ""));
  $("agent-close").addEventListener("click", () => select("pane", ""));
  window.addEventListener("hashchange", onHashChange);
  window.addEventListener("popstate", onHashChange);
  showFilters();
  showToken();
  setInterval(tick, 1000);
  schedule(0);
  startStream();
}

// The stream (which replays the log from its start: the machines' instance lists are drawn from it)
// begins once the first refresh is done, so a long log's replay never delays the first render. It
// misses nothing: it replays whatever happened in between.
let streaming = false;
function startStream() {
  if (streaming) return;
  if (!document.body.dataset.refreshed) {
    setTimeout(startStream, 50);
    return;
  }
  streaming = true;
  follow(onEvent, onState);
}

start();

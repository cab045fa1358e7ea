// The event search: the log read through GET /api/dashboard/events (a selected plan's events, or the
// latest of the whole log), the stream's new events added as they come, filtered in the page and shown
// newest first in a virtualized list.

import { get } from "./api.js";
import { el } from "./dom.js";
import { matcher } from "./filters.js";
import { VirtualList } from "./vlist.js";

const PAGE = 10000; // the route's most events per answer
const KEPT = 20000; // the newest events kept in memory (older ones are a search of the server away)
const PAGES = 10;

/** What the filters see of an event: its text, controller, agent (lease name), state (to), time. */
export function facets(e) {
  const changed = (e.payload && (e.payload.changed || e.payload.params)) || {};
  const controller = e.machine === "controller" ? String(e.instance).split("/")[1] : changed.controller_id || "";
  const agent = changed.name || changed.pane_id || "";
  return {
    text: `${e.seq} ${e.instance} ${e.trigger} ${e.from} ${e.to} ${e.actor} ${controller} ${agent}`.toLowerCase(),
    controller, agent, state: e.to, at: e.at,
  };
}

export class EventSearch {
  constructor(box, count) {
    this.count = count;
    this.events = []; // [{event, facets}] oldest first
    this.seen = new Set();
    this.plan = undefined;
    this.list = new VirtualList(box, (item) => row(item.event));
    this.state = {};
  }

  /** Read the events of `plan` (or the latest of the log) afresh, then show them filtered. */
  async load(plan) {
    this.plan = plan || null;
    const loaded = [];
    let since = 0;
    for (let page = 0; page < PAGES; page++) {
      const query = new URLSearchParams({ since: String(since), limit: String(PAGE) });
      if (this.plan) query.set("plan", this.plan);
      const doc = await get(`/api/dashboard/events?${query}`);
      for (const event of doc.events) loaded.push(event);
      if (loaded.length > KEPT) loaded.splice(0, loaded.length - KEPT);
      if (doc.next_since === null || doc.next_since === undefined) break;
      since = doc.next_since;
    }
    if (this.plan !== (plan || null)) return; // another load began meanwhile
    this.events = loaded.map((event) => ({ event, facets: facets(event) }));
    this.seen = new Set(loaded.map((e) => e.seq));
    this.show();
  }

  /** One event the stream brought: kept if it belongs (any event without a plan chosen). */
  add(event, planKeys) {
    if (this.plan === undefined || this.seen.has(event.seq)) return;
    if (this.plan && !planKeys(event)) return;
    this.seen.add(event.seq);
    this.events.push({ event, facets: facets(event) });
    if (this.events.length > KEPT) this.events.shift();
    this.dirty = true;
  }

  filter(state) {
    this.state = state;
    this.show();
  }

  show() {
    const match = matcher(this.state);
    const shown = [];
    for (let i = this.events.length - 1; i >= 0; i--) if (match(this.events[i].facets)) shown.push(this.events[i]);
    this.list.set(shown);
    this.count.textContent = `(${shown.length} of ${this.events.length}${this.plan ? ` of plan ${this.plan}` : ""})`;
    this.dirty = false;
  }
}

function row(e) {
  return el("div", { class: "vrow", data: { seq: String(e.seq), instance: e.instance, trigger: e.trigger } },
    el("span", { class: "mono", text: e.seq }), el("span", { class: "mono", text: e.at || "" }),
    el("span", { class: "mono", text: e.instance || "" }), el("span", { text: e.trigger }),
    el("span", { text: `${e.from ?? ""} → ${e.to ?? ""}` }), el("span", { class: "mono", text: e.actor || "" }));
}

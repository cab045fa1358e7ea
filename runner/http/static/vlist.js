// A virtualized list: however many rows it holds (a plan of 10,000 events), only those in view (and a
// margin) are in the DOM, so rendering and filtering cost what one screen costs.

const ROW_HEIGHT = 22; // px: fixed, so a row's position is its index times this (dashboard.css .vrow)
const MARGIN_ROWS = 20;

export class VirtualList {
  /**
   * @param {HTMLElement} box a scrolling element (fixed height, overflow auto)
   * @param {(item: any) => HTMLElement} build one row's element (class "vrow")
   */
  constructor(box, build) {
    this.box = box;
    this.build = build;
    this.items = [];
    this.spacer = document.createElement("div");
    this.spacer.className = "vspacer";
    this.rows = document.createElement("div");
    this.rows.className = "vrows";
    box.replaceChildren(this.spacer, this.rows);
    this.pending = false;
    box.addEventListener("scroll", () => this.schedule());
  }

  /** Show `items` (in display order) and draw the rows in view now. */
  set(items) {
    this.items = items;
    this.spacer.style.height = `${items.length * ROW_HEIGHT}px`;
    this.box.dataset.rows = String(items.length);
    this.draw();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
  }

  draw() {
    const height = this.box.clientHeight || 400;
    const first = Math.max(0, Math.floor(this.box.scrollTop / ROW_HEIGHT) - MARGIN_ROWS);
    const last = Math.min(this.items.length, Math.ceil((this.box.scrollTop + height) / ROW_HEIGHT) + MARGIN_ROWS);
    const nodes = [];
    for (let i = first; i < last; i++) nodes.push(this.build(this.items[i]));
    this.rows.style.transform = `translateY(${first * ROW_HEIGHT}px)`;
    this.rows.replaceChildren(...nodes);
    this.box.dataset.drawn = String(nodes.length);
  }
}

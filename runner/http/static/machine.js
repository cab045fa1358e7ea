// One machine drawn, with an instance's current state and path highlighted. The server draws it as SVG
// (GET /api/machines/NAME/drawing?format=svg, Graphviz); without Graphviz there it reads the DOT text
// and lists the states and transitions instead. An SVG is inserted only after it is cleaned: no script,
// no foreign content, no event handler, no link out, no inline style (the page's CSP refuses them).

import { get } from "./api.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const ALLOWED = new Set(["svg", "g", "path", "polygon", "polyline", "ellipse", "circle", "rect", "line", "text",
  "tspan", "title", "defs", "marker", "desc"]);

export function cleanSvg(text) {
  // Inline styles go before parsing: the parsed document inherits the page's CSP, which refuses them.
  const doc = new DOMParser().parseFromString(text.replace(/\sstyle\s*=\s*("[^"]*"|'[^']*')/g, ""), "image/svg+xml");
  const root = doc.documentElement;
  if (!root || root.localName !== "svg" || root.namespaceURI !== SVG_NS) return null;
  const walk = (node) => {
    for (const child of [...node.children]) {
      if (!ALLOWED.has(child.localName) || child.namespaceURI !== SVG_NS) {
        // a graphviz tooltip is an <a> around a node: keep what it holds, drop the link
        if (child.localName === "a") {
          walk(child);
          child.replaceWith(...child.childNodes);
        } else child.remove();
        continue;
      }
      walk(child);
    }
    for (const attr of [...node.attributes]) {
      const name = attr.name.toLowerCase();
      if (name.startsWith("on") || name === "style" || name.endsWith("href")) node.removeAttribute(attr.name);
    }
  };
  walk(root);
  // width and height stay: a small drawing keeps its size; CSS (max-width: 100%) shrinks a wide one.
  return document.importNode(root, true);
}

/** The states and transitions of a DOT drawing (the subset corral writes). */
export function parseDot(text) {
  const states = [];
  const edges = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    let m = line.match(/^"([^"]+)"\s*->\s*"([^"]+)"(?:\s*\[(.*)\])?;?$/);
    if (m) {
      const label = (m[3] || "").match(/label="((?:[^"\\]|\\.)*)"/);
      const trigger = label ? label[1].split(/\\l|\\n/)[0].trim().split(/\s/)[0] : "";
      edges.push({ from: m[1], to: m[2], trigger });
      continue;
    }
    m = line.match(/^"([^"]+)"\s*\[/);
    if (m && !m[1].startsWith("__") && !states.includes(m[1])) states.push(m[1]);
  }
  return { states, edges };
}

function list(doc, dot) {
  const { states, edges } = parseDot(dot);
  const visited = new Set(doc.path || []);
  const ol = document.createElement("ol");
  for (const state of states) {
    const li = document.createElement("li");
    li.dataset.state = state;
    const out = edges.filter((e) => e.from === state).map((e) => `${e.trigger} → ${e.to}`);
    li.textContent = state + (out.length ? ` (${out.join(", ")})` : "");
    if (state === doc.state) li.className = "current";
    else if (visited.has(state)) li.className = "visited";
    ol.append(li);
  }
  return ol;
}

// Whether the server draws SVG: unknown (null) until its first answer, false once it said it cannot
// (no Graphviz), and then only DOT is asked for. While the first answer is awaited, other drawings wait
// for it instead of each asking (and failing) in turn.
let svgWorks = null;
let probe = null;

/** Draw machine `name` (with `instance`: its path) into `box`; returns what the server said of it. */
export async function draw(box, name, instance) {
  while (svgWorks === null && probe) await probe;
  let settle = null;
  if (svgWorks === null) probe = new Promise((resolve) => (settle = resolve));
  try {
    return await drawWith(box, name, instance);
  } finally {
    if (settle) {
      if (svgWorks === null) svgWorks = box.dataset.format === "svg" ? true : null;
      probe = null;
      settle();
    }
  }
}

async function drawWith(box, name, instance) {
  const query = new URLSearchParams({ format: svgWorks === false ? "dot" : "svg" });
  if (instance) query.set("instance", instance);
  const base = `/api/machines/${encodeURIComponent(name)}/drawing`;
  let doc;
  let node = null;
  if (svgWorks !== false) {
    try {
      doc = await get(`${base}?${query}`);
      node = cleanSvg(doc.drawing);
    } catch (error) {
      if (error.status === 401 || error.code === "instance_unknown") throw error;
      if (error.code === "graphviz_unavailable" || error.code === "input_invalid") svgWorks = false;
    }
  }
  if (!node) {
    query.set("format", "dot");
    doc = await get(`${base}?${query}`);
    node = list(doc, doc.drawing);
  }
  box.replaceChildren(node);
  box.dataset.format = node.localName === "svg" ? "svg" : "list";
  box.dataset.state = doc.state || "";
  return doc;
}

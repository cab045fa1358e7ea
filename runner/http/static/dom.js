// Small DOM helpers shared by the dashboard's modules: text only, nothing the server sends is ever
// parsed as HTML.

export const $ = (id) => document.getElementById(id);

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "data") Object.assign(node.dataset, value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

export const dash = "—";

/** Seconds as a reader wants them: "0.004 s", "12.3 s", "4 min 5 s", "2 h 3 min". */
export function duration(seconds) {
  if (typeof seconds !== "number" || isNaN(seconds)) return dash;
  if (seconds < 1) return `${seconds.toFixed(3)} s`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

export const dollars = (v) => `$${Number(v || 0).toPrecision(3).replace(/\.?0+$/, "")}`;

/** Tokens and cost where a driven run recorded them, else a dash (unknown is never shown as zero). */
export function spent(tokens, cost) {
  if (tokens === null || tokens === undefined) return dash;
  return `${tokens} tok · ${dollars(cost)}`;
}

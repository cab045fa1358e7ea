// The REST API of this server, with the bearer token the user pasted (sessionStorage, this tab only).
// The token travels in the Authorization header and nowhere else: never in a URL, never in a log.

const TOKEN_KEY = "corral.dashboard.token";
// A request the server has not answered by then is given up (the next refresh asks again), so one
// stuck answer can never stall the page's refreshes for good.
const REQUEST_TIMEOUT_MS = 15000;

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function headers(extra = {}) {
  const out = { Accept: "application/json", ...extra };
  const t = token();
  if (t) out.Authorization = `Bearer ${t}`;
  return out;
}

/** An answer that is not 2xx: its status and the server's error document ({code, message, details}). */
export class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code ? error.code : `http_${status}`;
  }
}

let onUnauthorized = () => {};
export function whenUnauthorized(callback) {
  onUnauthorized = callback;
}

async function answer(response) {
  let doc = null;
  try {
    doc = await response.json();
  } catch {
    doc = null;
  }
  if (response.status === 401) onUnauthorized();
  if (!response.ok) throw new ApiError(response.status, doc && doc.error);
  return doc;
}

export async function get(path) {
  return answer(await fetch(path, {
    headers: headers(),
    cache: "no-store",
    credentials: "omit",
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  }));
}

export async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
    cache: "no-store",
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    credentials: "omit",
  });
  return answer(response);
}

// The server's event stream (GET /api/events) as Server-Sent Events, read with fetch so that the bearer
// token can go in a header (EventSource cannot send one, and a token never goes in a URL). Like
// EventSource it reconnects by itself and resumes with Last-Event-ID: the id of the last event seen.

import { headers } from "./api.js";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Follow the stream for ever.
 * @param {(event: {id: string, type: string, data: any}) => void} onEvent one parsed event
 * @param {(state: string, detail?: string) => void} onState "live", "reconnecting" or "unauthorized"
 */
export async function follow(onEvent, onState, { path = "/api/events", since = null } = {}) {
  let last = since;
  let delay = 250;
  for (;;) {
    try {
      const extra = { Accept: "text/event-stream" };
      if (last) extra["Last-Event-ID"] = last;
      const response = await fetch(path, { headers: headers(extra), cache: "no-store", credentials: "omit" });
      if (response.status === 401) {
        onState("unauthorized");
        await response.body?.cancel();
        await sleep(1000);
        continue;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      onState("live");
      delay = 250;
      for await (const event of parse(response.body)) {
        if (event.id) last = event.id;
        onEvent(event);
      }
    } catch (error) {
      onState("reconnecting", String(error && error.message ? error.message : error));
    }
    onState("reconnecting");
    await sleep(delay);
    delay = Math.min(delay * 2, 4000);
  }
}

/** The events of one SSE body (the text/event-stream format: fields, then a blank line). */
async function* parse(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let id = "", type = "", data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
        if (line === "") {
          if (data.length) {
            let parsed;
            try {
              parsed = JSON.parse(data.join("\n"));
            } catch {
              parsed = data.join("\n");
            }
            yield { id, type: type || "message", data: parsed };
          }
          type = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue; // a heartbeat comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "id") id = value;
        else if (field === "event") type = value;
        else if (field === "data") data.push(value);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

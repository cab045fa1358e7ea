"""Live progress on the event stream: ``agent.progress`` events on ``/api/events``.

While a driven agent (claude, codex) works, its tool calls and file changes (names and paths, never
contents) go out as ``event: agent.progress`` with a JSON object: ``pane_id``, ``name``, ``kind``,
``host``, ``run`` (the run's cursor), ``running``, ``start`` (the index of the first line in this
event), ``total`` (lines so far), ``lines`` (``tool Read src/a.py``, ``file src/a.py``) and ``items``
(the same as ``{"type": "tool", "tool", "path"}`` / ``{"type": "file", "path"}``). A run's last event
has ``running: false``.

**Not durable, and never in the log's sequence.** Progress is derived from the run's own log, not
recorded as an instance event: these events carry no ``id:`` line, so a client's ``Last-Event-ID``
stays the last durable event's and resuming is exactly as before. What replaces the replay is a
snapshot: a subscriber joining (or re-joining) is first sent, for every run working now, one event
with all its lines so far (``start`` 0), then what follows. A client keeps a run's lines by ``(pane_id,
run)`` and index (``start``), so an event it saw twice changes nothing; runs that ended while it was
away are not replayed (their receipts, ``agent read`` and ``status`` tell what they did).

**One follower per server** (:class:`ProgressHub`): it asks the service every ``POLL_SECONDS`` what
the driven agents did since it last looked (:meth:`Waits.live_progress`, which reads only the bytes
each run's log gained), encodes each update once and offers it to every subscriber; it runs only
while somebody listens. A subscriber whose buffer is full is dropped from the feed and re-joins with
a fresh snapshot; its durable events are not affected.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from runner.errors import CorralError
from runner.log import get_logger

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from runner.http.server import Server

log = get_logger("corral.http")

EVENT = "agent.progress"
POLL_SECONDS = 0.25
"""How often the follower looks for new tool calls and file changes while somebody listens."""
BUFFER = 256
"""Progress events waiting for one subscriber before it is dropped from the feed (and re-joins)."""
HOSTS = ("process",)
"""The hosts whose agents show progress (Herdr's panes have no machine output corral reads)."""


def progress_frame(update: dict[str, Any]) -> bytes:
    """One ``agent.progress`` event, without an ``id:`` line (it is not in the log's sequence)."""
    return f"event: {EVENT}\ndata: {json.dumps(update, sort_keys=True, default=str)}\n\n".encode()


class ProgressHub:
    """The server's one follower of its agents' progress; every subscriber takes what it reads."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.subscribers: set[MemoryObjectSendStream[bytes]] = set()
        self.running = False
        self.seen: dict[str, dict[str, tuple[int, int]]] = {}
        # Invariant: ``runs`` holds, for every run the follower saw working and not yet ended, every
        # line it sent of it: what a joining subscriber's snapshot is made of, so it misses none.
        self.runs: dict[tuple[str, str], dict[str, Any]] = {}

    def join(self) -> MemoryObjectReceiveStream[bytes]:
        """A new subscriber's feed: a snapshot of the runs working now, then what follows. No await
        between the snapshot and the join, so no line falls between them."""
        send, receive = anyio.create_memory_object_stream[bytes](BUFFER + len(self.runs))
        for update in self.runs.values():
            send.send_nowait(progress_frame(update))
        self.subscribers.add(send)
        if not self.running:
            self.running = True
            assert self.server.group is not None
            self.server.group.start_soon(self._run)
        return receive

    def leave(self, receive: MemoryObjectReceiveStream[bytes]) -> None:
        receive.close()  # its send side is discarded at the next offer (BrokenResourceError)

    async def _run(self) -> None:
        service = self.server.service
        try:
            while self.subscribers:
                for host in HOSTS:
                    try:
                        updates, self.seen[host] = await anyio.to_thread.run_sync(
                            service.waits.live_progress, host, self.seen.get(host, {})
                        )
                    except CorralError as exc:  # the host cannot be read now: try again at the next poll
                        log.warning("progress of %s agents: %s [%s]", host, exc.message, exc.code)
                        continue
                    for update in updates:
                        self._offer(update)
                await anyio.sleep(POLL_SECONDS)
        finally:
            self.running = False
            self.seen, self.runs = {}, {}
            for send in list(self.subscribers):
                send.close()
            self.subscribers.clear()

    def _offer(self, update: dict[str, Any]) -> None:
        key = (str(update["host"]), str(update["pane_id"]))
        kept = self.runs.get(key)
        if update["running"]:
            if kept is None or kept["run"] != update["run"] or update["start"] == 0:
                kept = {**update, "lines": [], "items": [], "start": 0}
            kept.update(running=True, total=update["total"])
            kept["lines"] = kept["lines"][: update["start"]] + list(update["lines"])
            kept["items"] = kept["items"][: update["start"]] + list(update["items"])
            self.runs[key] = kept
        else:
            self.runs.pop(key, None)
        encoded = progress_frame(update)
        for send in list(self.subscribers):
            try:
                send.send_nowait(encoded)
            except anyio.WouldBlock:
                self.subscribers.discard(send)
                send.close()  # it re-joins with a fresh snapshot
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.subscribers.discard(send)


def progress_hub(server: Server) -> ProgressHub:
    hub = getattr(server, "progress_hub", None)
    if hub is None:
        hub = ProgressHub(server)
        server.progress_hub = hub  # type: ignore[attr-defined]
    return hub


async def feed(server: Server, put: Any) -> None:
    """Send the progress feed through ``put`` (the stream's writer) until it refuses a chunk; a
    subscriber dropped for falling behind re-joins, with a fresh snapshot."""
    hub = progress_hub(server)
    while True:
        receive = hub.join()
        try:
            with receive:
                async for chunk in receive:
                    if not await put(chunk):
                        return
        finally:
            hub.leave(receive)
        await anyio.sleep(POLL_SECONDS)

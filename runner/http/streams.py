"""The event log as Server-Sent Events: ``/api/events``, ``/api/instances/{id}/events``, ``/api/plans/{id}/events``.

Each event goes out with ``id: <store id>:<seq>`` (the store's identity is the stream's epoch),
``event: <trigger>`` and ``data: <the event's JSON>`` (public data only, as in the log). A client resumes
with ``Last-Event-ID`` (or ``?since=SEQ``): the replay is read from the durable log, then the live tail
(read from the store, so every server on the store serves the same stream, and a restart loses
nothing). A cursor below the retention floor, or of another store (epoch), gets one ``gap`` event
naming the floor before the replay starts there. An instance stream ends with ``instance_ended`` once
the instance reaches a terminal state. A comment line goes out every ``heartbeat`` seconds.
``/api/events`` also carries the driven agents' live progress (``agent.progress``, no ``id:``: not
durable, resumed by a snapshot; :mod:`runner.http.progress`) unless asked ``?progress=0``.

**One tail per server** (:class:`Hub`): a single reader follows the log's new events and encodes each
once; every subscriber that has caught up takes them from it, so 50 subscribers cost one store read and
one JSON encoding per event, not 50. It learns of a commit within a few milliseconds
(:meth:`runner.service.events.Events.tail`: notified on PostgreSQL, a probe that reads no table every
``TAIL_TICK`` on SQLite, where the store's own wait looks only every 50 ms), and reads again as soon
as it has handed a batch over, so batches grow with the load instead of the delay.
A subscriber first replays from the store on its own (its cursor up
to the hub's), then joins the hub; events are told apart by seq, so the hand-over has no duplicate and
no hole.

**A slow subscriber never slows the others or the writers**: the hub never waits for one. Its live
events go into a buffer of ``subscriber_buffer``; a subscriber whose buffer fills leaves the hub and
catches up from the store on its own (bursts never cut off a reader that keeps up), and only one that
takes nothing for ``subscriber_grace`` seconds is disconnected (its next request resumes from its last id).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from runner.errors import CorralError, EventsPrunedError, InputError

if TYPE_CHECKING:
    from runner.context import Event
    from runner.http.server import Server

POLL_SECONDS = 1.0
"""How long one store wait lasts before the hub looks whether anybody still listens."""
PAGE = 500
CHUNK_BYTES = 16 * 1024
"""The most one write to a connection carries (whole events: a larger single event goes alone)."""
OUT_BUFFER = 4
"""Chunks waiting for one subscriber's connection: with ``CHUNK_BYTES``, what a reader that takes nothing
holds in the server's memory (bounded in bytes, so a reader that replays in pages of ``PAGE`` events
is cut off after the same amount of unread data as one fed live, one event at a time)."""


def chunks(frames: list[bytes]) -> list[bytes]:
    """``frames`` joined into writes of at most ``CHUNK_BYTES`` each (whole frames, in order)."""
    out: list[bytes] = []
    piece: list[bytes] = []
    size = 0
    for encoded in frames:
        if piece and size + len(encoded) > CHUNK_BYTES:
            out.append(b"".join(piece))
            piece, size = [], 0
        piece.append(encoded)
        size += len(encoded)
    if piece:
        out.append(b"".join(piece))
    return out


def parse_cursor(text: str | None, store_id: str) -> tuple[int, str | None]:
    """``<store id>:<seq>`` or a bare ``<seq>``: the sequence number and the epoch it names (None: bare).

    Raises:
        InputError: ``cursor_invalid`` for anything else.
    """
    if text is None or text == "":
        return 0, None
    epoch, sep, seq = text.rpartition(":")
    if not seq.isdigit() or len(seq) > 19:
        raise InputError(
            "since", f"{text!r} is not an event id (<store id>:<seq>) or a sequence number", code="cursor_invalid"
        )
    return int(seq), (epoch if sep else None)


def frame(event_type: str, ident: str, data: Any) -> bytes:
    """One SSE event, encoded (the JSON has no raw newline: ``json.dumps`` escapes them)."""
    text = data if isinstance(data, str) else json.dumps(data, sort_keys=True, default=str)
    return f"id: {ident}\nevent: {event_type}\ndata: {text}\n\n".encode()


class Subscriber:
    """One stream's place in the hub: its live buffer and whether it overflowed."""

    def __init__(self, size: int) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[tuple[int, "Event | None", bytes]](size)
        self.overflowed = False


class Hub:
    """The server's one reader of new events: each read once, encoded once, offered to every subscriber."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.subscribers: set[Subscriber] = set()
        self.head = -1
        """The seq the hub has read up to (-1: not running)."""
        self.store_id = ""

    def join(self, cursor: int, size: int) -> Subscriber | None:
        """A subscriber caught up to ``cursor``: it joins when the hub is not ahead of it (None: replay on).

        No await between the check and the join: the hub pushes only events after its head, so the
        subscriber misses none (it skips those at or below its own cursor)."""
        if self.head > cursor:
            return None
        sub = Subscriber(size)
        self.subscribers.add(sub)
        if self.head < 0:
            self.head = cursor
            assert self.server.group is not None
            self.server.group.start_soon(self._run)
        return sub

    def leave(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    async def _run(self) -> None:
        service = self.server.service
        try:
            while self.subscribers:
                try:
                    found = await anyio.to_thread.run_sync(service.events.tail, self.head, POLL_SECONDS, PAGE)
                except EventsPrunedError:
                    for sub in list(self.subscribers):  # they replay from their cursors, and get their gap there
                        self._drop(sub)
                    continue
                for event in found:
                    encoded = frame(event.trigger, f"{self.store_id}:{event.seq}", event.to_dict())
                    self.head = event.seq
                    for sub in list(self.subscribers):
                        try:
                            sub.send.send_nowait((event.seq, event, encoded))
                        except anyio.WouldBlock:
                            self._drop(sub)
                        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                            self.subscribers.discard(sub)
        finally:
            self.head = -1
            for sub in list(self.subscribers):
                self._drop(sub)

    def _drop(self, sub: Subscriber) -> None:
        """Out of the hub: the subscriber drains what it has, then catches up from the store."""
        sub.overflowed = True
        self.subscribers.discard(sub)
        sub.send.close()


def hub_of(server: Server) -> Hub:
    hub = getattr(server, "hub", None)
    if hub is None:
        hub = Hub(server)
        server.hub = hub  # type: ignore[attr-defined]
    return hub


def endpoint(server: Server, scope: str) -> Any:
    """The endpoint of one stream kind: ``all``, ``instance`` (path ``id``) or ``plan`` (path ``plan_id``)."""

    async def stream(request: Any) -> Any:
        from sse_starlette.sse import EventSourceResponse

        from runner.http.responses import error_response

        service = server.service
        try:
            store_id = await anyio.to_thread.run_sync(service.events.store_id)
            given = request.headers.get("last-event-id") or request.query_params.get("since")
            since, epoch = parse_cursor(given, store_id)
            instance_id: str | None = None
            if scope == "instance":
                instance_id = request.path_params["id"]
            elif scope == "plan":
                from runner.service.plan_state import plan_instance_id

                instance_id = plan_instance_id(request.path_params["plan_id"])
            snapshot = None
            if instance_id is not None:
                snapshot = await anyio.to_thread.run_sync(service.events.snapshot, instance_id)
                if snapshot is None:
                    raise InputError("id", f"no instance {instance_id!r}", code="instance_unknown")
            floor = await anyio.to_thread.run_sync(service.events.floor)
        except CorralError as exc:
            return error_response(exc)
        gap: dict[str, Any] | None = None
        if epoch is not None and epoch != store_id:
            gap = {"reason": "epoch", "floor": floor, "since": since, "epoch": epoch, "store_id": store_id}
            since = floor
        elif since < floor:
            gap = {"reason": "pruned", "floor": floor, "since": since, "store_id": store_id}
            since = floor
        out_send, out_receive = anyio.create_memory_object_stream[bytes](OUT_BUFFER)
        grace = server.options.subscriber_grace
        hub = hub_of(server)
        hub.store_id = store_id

        def ended(state: str, seq: int, ident: int) -> bytes:
            return frame("instance_ended", f"{store_id}:{ident}", {"instance": instance_id, "state": state, "seq": seq})

        async def put(chunk: bytes) -> bool:
            """Into the connection's buffer; False (the stream ends) when it takes nothing for ``grace`` s."""
            with anyio.move_on_after(grace):
                try:
                    await out_send.send(chunk)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return False
                return True
            return False

        async def put_all(frames: list[bytes]) -> bool:
            """``frames`` into the connection's buffer in writes of ``CHUNK_BYTES``; False as :func:`put`."""
            for piece in chunks(frames):
                if not await put(piece):
                    return False
            return True

        async def produce() -> None:
            """Replay from the store up to the hub, take the hub's events, and replay again after an overflow."""
            cursor = since
            with out_send:
                if gap is not None and not await put(frame("gap", f"{store_id}:{cursor}", gap)):
                    return
                if snapshot is not None and snapshot["terminal"] and cursor >= int(snapshot["last_event_seq"]):
                    await put(ended(str(snapshot["state"]), int(snapshot["last_event_seq"]), cursor))
                    return
                while True:
                    # replay: pages from the store until caught up with the hub
                    while True:
                        try:
                            found = await anyio.to_thread.run_sync(service.events.wait, cursor, 0.0, PAGE)
                        except EventsPrunedError as exc:
                            floor_now = int(exc.details.get("floor") or 0)
                            pruned = {"reason": "pruned", "floor": floor_now, "since": cursor, "store_id": store_id}
                            if not await put(frame("gap", f"{store_id}:{floor_now}", pruned)):
                                return
                            cursor = floor_now
                            continue
                        chunk: list[bytes] = []
                        for event in found:
                            cursor = event.seq
                            if instance_id is not None and event.instance_id != instance_id:
                                continue
                            chunk.append(frame(event.trigger, f"{store_id}:{event.seq}", event.to_dict()))
                            if instance_id is not None and service.events.terminal(event.machine, event.to_state):
                                chunk.append(ended(event.to_state, event.seq, event.seq))
                                await put_all(chunk)
                                return
                        if chunk and not await put_all(chunk):
                            return
                        if len(found) < PAGE:
                            sub = hub.join(cursor, server.options.subscriber_buffer)
                            if sub is not None:
                                break
                    # live: the hub's events, a batch of what is buffered per write
                    try:
                        with sub.receive:
                            async for first in sub.receive:
                                batch = [first]
                                while True:
                                    try:
                                        batch.append(sub.receive.receive_nowait())
                                    except (anyio.WouldBlock, anyio.EndOfStream):
                                        break
                                chunk = []
                                for seq, live, encoded in batch:
                                    if seq <= cursor:
                                        continue  # replayed already
                                    cursor = seq
                                    if live is None or (instance_id is not None and live.instance_id != instance_id):
                                        continue
                                    chunk.append(encoded)
                                    if instance_id is not None and service.events.terminal(live.machine, live.to_state):
                                        chunk.append(ended(live.to_state, live.seq, live.seq))
                                        await put_all(chunk)
                                        return
                                if chunk and not await put_all(chunk):
                                    return
                    finally:
                        hub.leave(sub)
                    # the hub dropped us (our buffer overflowed, or it stopped): catch up from the store

        stop = anyio.CancelScope()
        live = scope == "all" and request.query_params.get("progress", "1") not in ("0", "false", "no")

        async def producer() -> None:
            with stop:
                if not live:
                    await produce()
                    return
                from runner.http.progress import feed

                async with anyio.create_task_group() as both:
                    both.start_soon(feed, server, put)
                    await produce()
                    both.cancel_scope.cancel()

        async def events() -> Any:
            server.group.start_soon(producer)  # the server's task group: never a task group across a yield
            try:
                with out_receive:
                    async for chunk in out_receive:
                        yield chunk
            finally:
                stop.cancel()

        return EventSourceResponse(
            events(), ping=server.options.heartbeat, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )

    return stream

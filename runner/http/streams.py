"""The event log as Server-Sent Events: ``/api/events``, ``/api/instances/{id}/events``, ``/api/plans/{id}/events``.

Each event goes out with ``id: <store id>:<seq>`` (the store's identity is the stream's epoch),
``event: <trigger>`` and ``data: <the event's JSON>`` (public data only, as in the log). A client resumes
with ``Last-Event-ID`` (or ``?since=SEQ``): the replay is read from the durable log, then the live tail
(re-read from the store, so every server on the store serves the same stream, and a restart loses
nothing). A cursor below the retention floor, or of another store (epoch), gets one ``gap`` event
naming the floor before the replay starts there. An instance stream ends with ``instance_ended`` once
the instance reaches a terminal state. A comment line goes out every ``heartbeat`` seconds.

A slow subscriber never slows the others or the writers: events are read into a buffer of
``subscriber_buffer`` per subscriber; when it stays full for ``subscriber_grace`` seconds (the client
took nothing in that time) the subscriber is disconnected (its next request resumes from its last id).
A reader that keeps up is never cut off by a burst larger than its buffer (a replay, a busy writer).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from runner.errors import CorralError, EventsPrunedError, InputError

if TYPE_CHECKING:
    from runner.http.app import Server

POLL_SECONDS = 1.0
"""How long one store wait lasts before the reader looks whether its subscriber is still there."""
PAGE = 500


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


def endpoint(server: Server, scope: str) -> Any:
    """The endpoint of one stream kind: ``all``, ``instance`` (path ``id``) or ``plan`` (path ``plan_id``)."""

    async def stream(request: Any) -> Any:
        from sse_starlette.sse import EventSourceResponse

        from runner.http.app import error_response

        service = server.service
        try:
            store_id = await anyio.to_thread.run_sync(service.events.store_id)
            given = request.headers.get("last-event-id") or request.query_params.get("since")
            since, epoch = parse_cursor(given, store_id)
            instance_id: str | None = None
            if scope == "instance":
                instance_id = request.path_params["id"]
            elif scope == "plan":
                from runner.service.plans import plan_instance_id

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
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](server.options.subscriber_buffer)
        grace = server.options.subscriber_grace

        async def read() -> None:
            """The store's events after the cursor, into the subscriber's buffer; full: disconnect."""
            cursor = since
            with send:
                if gap is not None:
                    send.send_nowait({"event": "gap", "id": f"{store_id}:{cursor}", "data": gap})  # buffer >= 1
                while True:
                    try:
                        found = await anyio.to_thread.run_sync(service.events.wait, cursor, POLL_SECONDS, PAGE)
                    except EventsPrunedError as exc:
                        floor_now = int(exc.details.get("floor") or 0)
                        pruned = {"reason": "pruned", "floor": floor_now, "since": cursor, "store_id": store_id}
                        gap_now = {"event": "gap", "id": f"{store_id}:{floor_now}", "data": pruned}
                        if not await _offer(send, gap_now, grace):
                            return
                        cursor = floor_now
                        continue
                    for event in found:
                        cursor = event.seq
                        if instance_id is not None and event.instance_id != instance_id:
                            continue
                        item = {"event": event.trigger, "id": f"{store_id}:{event.seq}", "data": event.to_dict()}
                        if not await _offer(send, item, grace):
                            return  # the subscriber is too slow: it resumes from its last id
                        if instance_id is not None and service.events.terminal(event.machine, event.to_state):
                            ended = {"instance": instance_id, "state": event.to_state, "seq": event.seq}
                            last = {"event": "instance_ended", "id": f"{store_id}:{event.seq}", "data": ended}
                            await _offer(send, last, grace)
                            return
                    if (
                        instance_id is not None
                        and snapshot is not None
                        and snapshot["terminal"]
                        and cursor >= int(snapshot["last_event_seq"])
                    ):
                        ended = {"instance": instance_id, "state": snapshot["state"], "seq": snapshot["last_event_seq"]}
                        last = {"event": "instance_ended", "id": f"{store_id}:{cursor}", "data": ended}
                        await _offer(send, last, grace)
                        return

        stop = anyio.CancelScope()

        async def reader() -> None:
            with stop:
                await read()

        async def events() -> Any:
            from sse_starlette.event import ServerSentEvent

            server.group.start_soon(reader)  # the server's task group: never a task group across a yield
            try:
                with receive:
                    async for item in receive:
                        yield ServerSentEvent(
                            data=json.dumps(item["data"], sort_keys=True, default=str),
                            event=item["event"],
                            id=item["id"],
                        )
            finally:
                stop.cancel()

        return EventSourceResponse(
            events(), ping=server.options.heartbeat, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )

    return stream


async def _offer(send: Any, item: dict[str, Any], grace: float) -> bool:
    """Put ``item`` in the subscriber's buffer; False (and the stream ends) when it stays full for
    ``grace`` seconds. A burst (a replay reads pages of :data:`PAGE`) waits for a reader that keeps
    up; only one that takes nothing for ``grace`` is cut off (the log is durable: it resumes)."""
    try:
        send.send_nowait(item)
        return True
    except anyio.WouldBlock:
        pass
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return False
    with anyio.move_on_after(grace):
        try:
            await send.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return True
    return False

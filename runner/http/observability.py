"""``corral serve``'s observability: a span per HTTP request (:class:`Traced`, when ``OTEL_*`` asks for
traces) and ``GET /metrics`` (Prometheus's text format, when ``corral[metrics]`` is installed).

``/metrics`` is behind the same bearer token as ``/api`` (:class:`runner.http.app.Guard`) and the
same ``Host``/``Origin`` checks; it holds counts and names only (no id, path or token in a label).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from runner.errors import CorralError
from runner.http.routes import OWN_ROUTES
from runner.log import get_logger
from runner.observe import meter, tracing

if TYPE_CHECKING:
    from runner.http.server import Server
    from runner.observe.metrics import StoreFacts

log = get_logger(__name__)

LEASE_MACHINES = ("controller", "reviewer", "writer", "adopted", "pane")
"""The machines whose instances are leases (``corral_leases``)."""
METRICS_PATH = next(r.path for r in OWN_ROUTES if r.extra == "metrics")


def is_stream(method: str, path: str) -> bool:
    """Whether a request opens an event stream (an SSE subscriber while it lasts)."""
    return method == "GET" and path.startswith("/api/") and path.endswith("/events")


class Traced:
    """The outermost middleware: one server span per request (``GET /api/plans/{plan_id}``: the route
    template, never the path's ids or the query), continuing a caller's ``traceparent``; and the SSE
    subscriber gauge. Costs a dictionary read per request while both are off."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stream = meter.SINK is not None and is_stream(scope["method"], scope["path"])
        if stream:
            assert meter.SINK is not None
            meter.SINK.subscribers(1)
        try:
            if tracing.active():
                await self._traced(scope, receive, send)
            else:
                await self.app(scope, receive, send)
        finally:
            if stream and meter.SINK is not None:
                meter.SINK.subscribers(-1)

    async def _traced(self, scope: Any, receive: Any, send: Any) -> None:
        method = scope["method"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        status: list[int] = []

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        attributes = {"http.request.method": method, "url.scheme": scope.get("scheme", "http")}
        with tracing.span(method, attributes, kind="server", parent=tracing.extract(headers)) as span:
            try:
                await self.app(scope, receive, sending)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str):
                    span.set_attribute("http.route", route)
                    span.update_name(f"{method} {route}")
                if status:
                    span.set_attribute("http.response.status_code", status[0])
                    if status[0] >= 500:
                        tracing.mark_error(span, str(status[0]))


# --- /metrics ----------------------------------------------------------------------------------------------


def metrics_routes(server: Server) -> list[Any]:
    """``GET /metrics``, and the process's meter sink set, if prometheus-client is installed; else none
    (``/metrics`` is then 404, and serve says once why)."""
    try:
        from runner.observe.metrics import CONTENT_TYPE, Metrics
    except ImportError:
        log.info("prometheus-client is not installed (corral[metrics]): no /metrics")
        return []
    import prometheus_client

    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # serve only: the _created series double every counter
    metrics = Metrics(lambda: store_facts(server))
    meter.SINK = metrics

    async def endpoint(request: Any) -> Any:
        from starlette.responses import Response

        from runner.http.responses import error_response

        try:
            body = await anyio.to_thread.run_sync(metrics.exposition)
        except CorralError as exc:
            return error_response(exc)
        return Response(body, media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})

    from starlette.routing import Route

    return [Route(METRICS_PATH, endpoint, methods=["GET"])]


def store_facts(server: Server) -> StoreFacts:
    """What ``/metrics`` reads from the store: one grouped count of instances and one list of agents."""
    from runner.observe.metrics import StoreFacts

    facts = StoreFacts()
    events = server.service.events
    for (machine, state), n in server.runtime.store.counts().items():
        if (machine not in LEASE_MACHINES and machine != "receipt") or events.terminal(machine, state):
            continue
        if machine in LEASE_MACHINES:
            facts.leases[(machine, state)] = n
        elif machine == "receipt":
            facts.receipts[state] = n
    try:
        agents = server.service.inventory.agents("process")
    except CorralError as exc:  # the host is unusable here: the gauges of agents are left out, not a 500
        log.info("metrics: the process host's agents were not read: %s [%s]", exc.message, exc.code)
        agents = []
    for agent in agents:
        kind, status = str(agent.get("kind")), str(agent.get("status"))
        facts.agents[(kind, status)] = facts.agents.get((kind, status), 0) + 1
        spend = agent.get("spend") or {}
        facts.agent_runs[kind] = facts.agent_runs.get(kind, 0) + int(spend.get("runs") or 0)
        facts.agent_tokens[kind] = facts.agent_tokens.get(kind, 0) + int(spend.get("tokens") or 0)
    return facts

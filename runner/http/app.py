"""``corral serve``: the HTTP API (REST under ``/api``, resumable Server-Sent Events, the dashboard).

Starlette on uvicorn, through the runtime and the service only: each REST route calls one tool of the
operation table the MCP server serves (:mod:`runner.http.routes`), so arguments, checks, codes and
result documents are the MCP tools' (and the CLI's ``--json``). What is HTTP's own:

- **Credentials**: a grant's response carries ``credential`` once (a string); later calls present it in
  the ``Corral-Credential`` header. It is never in a URL, never logged (there is no access log of
  headers or queries), never in an error.
- **Agent tokens** (the mesh): an agent's first check-in answers ``agent_token`` once; its
  later mesh calls present it in the ``Corral-Agent-Token`` header (never in the body, a URL or a
  log), which fills the tools' ``agent_token`` argument.
- **Errors**: ``{"error": {code, message, details}}`` with the status from :func:`runner.http.responses.http_status`.
- **Idempotency**: a POST with ``Idempotency-Key`` is recorded in the store (key, SHA-256 of method,
  path and body, the response) for ``--idempotency-ttl`` (24 h): the same key and body replays the
  response (``Idempotent-Replayed: true``), another body is 409 ``idempotency_mismatch``. Every server
  on the store shares them.
- **Limits**: bodies over ``--max-request-size`` are 413 before they are read whole; path arguments are
  contained under ``--workdir-root`` (symlinks resolved) and a raw ``..`` is always refused.
- **Streams** (:mod:`runner.http.streams`): the durable event log as SSE, resumable by ``Last-Event-ID``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from runner.errors import CorralError, InputError, RefusedError
from runner.http.keeper import HeaderKeeper, credential_header
from runner.http.observability import METRICS_PATH
from runner.http.responses import error_response
from runner.http.server import Options, Server

if TYPE_CHECKING:
    from runner.runtime import Runtime

CREDENTIAL_HEADER = "corral-credential"
AGENT_TOKEN_HEADER = "corral-agent-token"


def _json_response(doc: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Any:
    from starlette.responses import Response

    body = json.dumps(doc, sort_keys=True, default=str).encode()
    return Response(body, status_code=status, media_type="application/json", headers=dict(headers or {}))


# --- arguments ------------------------------------------------------------------------------------------


def _query_args(tool: Any, query: Any) -> dict[str, Any]:
    """GET arguments from the query string, typed by the tool's input schema (repeat a key for a list)."""
    props = tool.input_schema["properties"]
    args: dict[str, Any] = {}
    for name in set(query.keys()):
        schema = props.get(name)
        if schema is None:
            raise InputError(name, f"{tool.name} takes no argument {name!r}")
        values = query.getlist(name)
        kind = schema.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        if "array" in kinds:
            item = schema.get("items", {}).get("type")
            args[name] = [_scalar(name, v, [item]) for v in values]
        else:
            if len(values) != 1:
                raise InputError(name, f"give {name} once")
            args[name] = _scalar(name, values[0], kinds)
    return args


def _scalar(name: str, text: str, kinds: list[Any]) -> Any:
    if "integer" in kinds:
        try:
            return int(text)
        except ValueError:
            raise InputError(name, f"{text!r} is not an integer") from None
    if "number" in kinds:
        try:
            return float(text)
        except ValueError:
            raise InputError(name, f"{text!r} is not a number") from None
    if "boolean" in kinds:
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise InputError(name, f"{text!r} is not true or false")
    if text == "" and "null" in kinds:
        return None
    return text


# --- the app -----------------------------------------------------------------------------------------------


async def _body(request: Any) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    from runner import jsonvalues

    try:
        # The strict reader: nesting past jsonvalues.MAX_DEPTH is refused here, not a RecursionError (a 500).
        doc = jsonvalues.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(
            "body", f"the request body is not JSON values corral takes: {exc}", code="body_invalid"
        ) from None
    if not isinstance(doc, dict):
        raise InputError("body", "the request body is not a JSON object", code="body_invalid")
    return doc


def _endpoint(server: Server, route: Any) -> Any:
    from runner.mcp.tools import TOOLS

    tool = TOOLS[route.tool]

    async def endpoint(request: Any) -> Any:
        keeper = HeaderKeeper(request.headers.get(CREDENTIAL_HEADER))
        try:
            if route.method == "GET":
                args = _query_args(tool, request.query_params)
            else:
                args = await _body(request)
            for param, arg in route.path_args.items():
                value = request.path_params[param]
                if arg in args and args[arg] != value:
                    raise InputError(arg, f"{arg} is {value!r} in the path and {args[arg]!r} in the body")
                args[arg] = value
            _agent_token(tool, args, request.headers.get(AGENT_TOKEN_HEADER))
            if route.tool == "corral_agent_get" and "wait" in request.query_params:
                return await _agent_wait(server, request, args, keeper)
            if route.background:
                return await _background(server, route, args, keeper)
            result = await server.call(route.tool, args, keeper)
        except CorralError as exc:
            return error_response(exc)
        except Exception as exc:  # noqa: BLE001 - reported as internal, never a traceback
            from runner.mcp.server import unexpected

            return error_response(unexpected(exc))
        if keeper.issued is not None:
            result["credential"] = credential_header(keeper.issued)
        return _json_response(result)

    return endpoint


def _view_endpoint(server: Server, view: Any) -> Any:
    """A dashboard view (:data:`runner.http.routes.VIEWS`): its path and query arguments, one call of
    ``service.board.<view>`` in a worker thread, its document; an error as every route answers one."""
    import functools
    import importlib

    async def endpoint(request: Any) -> Any:
        try:
            args = [request.path_params[param] for param in view.path_args]
            if view.query is not None:
                module, _, name = view.query.rpartition(".")
                query_input = getattr(importlib.import_module(f"runner.service.inputs.{module}"), name)
                args.append(query_input.from_query(request.query_params))
            elif request.query_params:
                raise InputError(next(iter(request.query_params)), f"{view.path} takes no query")
            method = getattr(server.service.board, view.view)
            result = await anyio.to_thread.run_sync(functools.partial(method, *args))
        except CorralError as exc:
            return error_response(exc)
        except Exception as exc:  # noqa: BLE001 - reported as internal, never a traceback
            from runner.mcp.server import unexpected

            return error_response(unexpected(exc))
        return _json_response(result)

    return endpoint


def _agent_token(tool: Any, args: dict[str, Any], header: str | None) -> None:
    """A mesh tool's ``agent_token`` from the ``Corral-Agent-Token`` header (never the body or query)."""
    if "agent_token" not in tool.input_schema["properties"]:
        return
    if "agent_token" in args:
        raise InputError(
            "agent_token",
            "the agent token goes in the Corral-Agent-Token header, never in the body or a URL",
            code="agent_token_misplaced",
        )
    if header is not None:
        args["agent_token"] = header.strip()


async def _agent_wait(server: Server, request: Any, args: dict[str, Any], keeper: HeaderKeeper) -> Any:
    """``GET /api/agents/{pane}?wait=DURATION&after_seq=N``: block until settled after the cursor; 408 with
    the last observation when it does not within DURATION."""
    from runner.service.events import parse_duration

    wait = request.query_params["wait"]
    try:
        timeout = float(wait)
    except ValueError:
        timeout = parse_duration(wait, "wait").total_seconds()
    wait_args = {k: v for k, v in args.items() if k in ("target", "host")}
    if "after_seq" in request.query_params:
        wait_args["after_seq"] = _scalar("after_seq", request.query_params["after_seq"], ["integer"])
    wait_args["timeout"] = timeout
    try:
        return _json_response(await server.call("corral_agent_wait", wait_args, keeper))
    except CorralError as exc:
        if exc.code != "wait_timeout":
            raise
        last = await server.call("corral_agent_get", {k: v for k, v in args.items() if k in ("target", "host")}, keeper)
        return error_response(exc, {"observation": last["observation"]})


async def _background(server: Server, route: Any, args: dict[str, Any], keeper: HeaderKeeper) -> Any:
    """A plan route: recorded (and, for retry, redriven) now; the run goes on in the server (202)."""
    plan_id = str(args.get("plan_id") or "")
    if route.tool == "corral_run":
        submitted = await server.call("corral_run", {**args, "run": False}, keeper)
        plan_id = str(submitted["plan"])
        if submitted["state"] not in ("succeeded", "cancelled", "failed"):
            server.run_plan_later(plan_id, "run" if submitted["created"] else "resume")
        return _json_response(submitted, 202, {"Location": f"/api/plans/{plan_id}"})
    plans = await anyio.to_thread.run_sync(server._plans)
    if route.tool == "corral_plans_retry":
        from runner.service.inputs.plans import PlanRetryInput

        await anyio.to_thread.run_sync(plans.retry, PlanRetryInput(plan_id))
    shown = await server.call("corral_plans_show", {"plan_id": plan_id}, keeper)
    server.run_plan_later(plan_id, "resume")
    return _json_response(shown, 202, {"Location": f"/api/plans/{plan_id}"})


def build_app(runtime: Runtime, options: Options) -> Any:
    """The ASGI app: the REST routes, the streams, the OpenAPI document, the dashboard, behind the guards."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Route

    from runner.http import streams
    from runner.http.openapi import document
    from runner.http.routes import ROUTES, VIEWS

    server = Server(runtime, options)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        async with anyio.create_task_group() as group:
            server.group = group
            yield
            group.cancel_scope.cancel()

    async def ping(request: Request) -> Any:
        store_id = await anyio.to_thread.run_sync(server.service.events.store_id)
        from runner._version import __version__

        return _json_response({"ok": True, "version": __version__, "store_id": store_id})

    async def openapi(request: Request) -> Any:
        return _json_response(document())

    async def instance(request: Request) -> Any:
        found = await anyio.to_thread.run_sync(server.service.events.snapshot, request.path_params["id"])
        if found is None:
            return error_response(
                InputError("id", f"no instance {request.path_params['id']!r}", code="instance_unknown")
            )
        return _json_response(found)

    async def decisions(request: Request) -> Any:
        try:
            listed = await anyio.to_thread.run_sync(_decisions, server)
        except CorralError as exc:
            return error_response(exc)
        return _json_response({"decisions": listed})

    async def decide(request: Request) -> Any:
        try:
            body = await _body(request)
            done = await _decide(server, request.path_params["id"], body)
        except CorralError as exc:
            return error_response(exc)
        return _json_response(done, 202)

    routes: list[Any] = [
        Route("/api/ping", ping, methods=["GET"]),
        Route("/api/openapi.json", openapi, methods=["GET"]),
        Route("/api/events", streams.endpoint(server, "all"), methods=["GET"]),
        Route("/api/plans/{plan_id}/events", streams.endpoint(server, "plan"), methods=["GET"]),
        Route("/api/instances/{id:path}/events", streams.endpoint(server, "instance"), methods=["GET"]),
        Route("/api/instances/{id:path}", instance, methods=["GET"]),
        Route("/api/decisions", decisions, methods=["GET"]),
        Route("/api/decisions/{id:path}", decide, methods=["POST"]),
    ]
    routes += [Route(r.path, _endpoint(server, r), methods=[r.method]) for r in ROUTES]
    routes += [Route(v.path, _view_endpoint(server, v), methods=["GET"]) for v in VIEWS]
    routes += _dashboard_routes()
    from runner.http.observability import Traced, metrics_routes

    routes += metrics_routes(server)  # GET /metrics, with corral[metrics]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.corral = server
    # The body cap is outside Idempotency, which reads a keyed request's body whole to digest it.
    # The host check is outermost: a forged Host or Origin reaches nothing, token or no token.
    from runner.mcp.hosts import HostGuard

    guarded = Guard(BodyLimit(Idempotency(app, server), options.max_request_size), options)
    # The request span is outermost of all, so a refused Host or token is traced too.
    return Traced(HostGuard(guarded, options.allowed_hosts, check_host=options.check_host))


def _dashboard_routes() -> list[Any]:
    from starlette.responses import FileResponse, PlainTextResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    static = Path(__file__).parent / "static"
    if not (static / "index.html").is_file():
        return []

    async def index(request: Any) -> Any:
        return FileResponse(static / "index.html", headers={"Cache-Control": "no-store"})

    del PlainTextResponse
    return [Route("/", index, methods=["GET"]), Mount("/static", StaticFiles(directory=static), name="static")]


def _decisions(server: Server) -> list[dict[str, Any]]:
    decisions = getattr(server.service, "decisions", None)
    if decisions is None:
        return []
    listed = decisions.list() if hasattr(decisions, "list") else decisions()
    return list(listed)


async def _decide(server: Server, decision_id: str, body: dict[str, Any]) -> dict[str, Any]:
    decision = body.get("decision")
    if decision not in ("approve", "reject"):
        raise InputError("decision", f"{decision!r} is not approve or reject")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InputError("reason", "a decision needs a reason (1-1000 characters): it is recorded")
    decisions = server.service.decisions
    from runner.service.decisions import DecideInput

    who = body.get("actor")
    if who is not None and not (isinstance(who, str) and 1 <= len(who) <= 200 and who.isprintable()):
        raise InputError("actor", "actor names who decides: 1-200 printable characters")
    extra = set(body) - {"decision", "reason", "actor"}
    if extra:
        raise InputError(sorted(extra)[0], "a decision takes decision, reason and actor only")
    actor = server.runtime.service.actor + (f" for {who}" if who else "")
    inp = DecideInput(decision_id, decision == "approve", reason, actor)
    done = await anyio.to_thread.run_sync(decisions.decide, inp)
    plan_id = done.get("plan") if isinstance(done, dict) else None
    if plan_id:
        server.run_plan_later(str(plan_id), "resume")
    return dict(done) if isinstance(done, dict) else {"decided": decision_id}


# --- middleware -------------------------------------------------------------------------------------------


class BodyLimit:
    """413 for a body over the limit: by its Content-Length before reading, or as it streams in."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        too_large = InputError(
            "body", f"the request body is over {self.limit} bytes (--max-request-size)", code="request_too_large"
        )
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await error_response(too_large)(scope, receive, send)
            return
        seen = 0
        chunks: list[dict[str, Any]] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                chunks.append(message)
                break
            seen += len(message.get("body", b""))
            if seen > self.limit:
                await error_response(too_large)(scope, receive, send)
                return
            chunks.append(message)
            if not message.get("more_body"):
                break
        replay = iter(chunks)

        async def again() -> Any:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        await self.app(scope, again, send)


class Idempotency:
    """``Idempotency-Key`` on a POST: reserved in the store, the response recorded, replayed for the same
    key and body (``Idempotent-Replayed: true``), refused for another body (409 ``idempotency_mismatch``)."""

    def __init__(self, app: Any, server: Server) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        key = headers.get("idempotency-key")
        if key is None:
            await self.app(scope, receive, send)
            return
        if not (1 <= len(key) <= 255 and key.isprintable()):
            error = InputError(
                "idempotency_key", "an Idempotency-Key is 1-255 printable characters", code="idempotency_key_invalid"
            )
            await error_response(error)(scope, receive, send)
            return
        body = bytearray()
        messages: list[dict[str, Any]] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        digest = hashlib.sha256(b"POST\n" + scope["path"].encode() + b"\n" + bytes(body)).hexdigest()
        # A credential is part of the request: a replay must not hand one caller's response to another.
        digest = hashlib.sha256((digest + "\n" + headers.get(CREDENTIAL_HEADER, "")).encode()).hexdigest()
        if AGENT_TOKEN_HEADER in headers:  # so is an agent token
            digest = hashlib.sha256((digest + "\n" + headers[AGENT_TOKEN_HEADER]).encode()).hexdigest()
        store = self.server.runtime.store
        raw_key, key = key, _stored_key(key)  # the store never holds the key that unseals a credential
        try:
            found = await anyio.to_thread.run_sync(
                store.reserve_idempotency, key, digest, self.server.options.idempotency_ttl
            )
        except CorralError as exc:
            await error_response(exc)(scope, receive, send)
            return
        if found is not None:
            await self._answer_existing(found, raw_key, digest, scope, receive, send)
            return
        replay = iter(messages)

        async def again() -> Any:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        status: list[int] = []
        sent: list[bytes] = []
        held: list[Any] = []

        async def recording(message: Any) -> None:
            # Held back until the record is complete: a client that retries the moment it has its
            # answer must find the answer recorded, never "still in progress".
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            elif message["type"] == "http.response.body":
                sent.append(message.get("body", b""))
            held.append(message)

        try:
            await self.app(scope, again, recording)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(store.release_idempotency, key)
            raise
        code = status[0] if status else 500
        if code >= 500:  # nothing was decided: let a retry run again
            await anyio.to_thread.run_sync(store.release_idempotency, key)
        else:
            recorded = _seal(b"".join(sent).decode("utf-8", "replace"), raw_key, digest)
            await anyio.to_thread.run_sync(store.complete_idempotency, key, code, recorded)
        for message in held:
            await send(message)

    async def _answer_existing(
        self, found: Any, raw_key: str, digest: str, scope: Any, receive: Any, send: Any
    ) -> None:
        from starlette.responses import Response

        if found.request_sha256 != digest:
            error = RefusedError(
                "this Idempotency-Key was used for another request (method, path, body or credential)",
                code="idempotency_mismatch",
            )
            await _conflict(error)(scope, receive, send)
            return
        if found.state != "done":
            error = RefusedError(
                "a request with this Idempotency-Key is still in progress", code="idempotency_in_progress"
            )
            await _conflict(error)(scope, receive, send)
            return
        response = Response(
            _unseal(found.response or "", raw_key, digest).encode(),
            status_code=int(found.status or 200),
            media_type="application/json",
            headers={"Idempotent-Replayed": "true"},
        )
        await response(scope, receive, send)


def _stored_key(key: str) -> str:
    """The name a key's record has in the store: its SHA-256 (the key itself unseals the credential)."""
    return hashlib.sha256(b"corral idempotency key\0" + key.encode()).hexdigest()


def _pad(key: str, digest: str, size: int) -> bytes:
    # One record per key and request digest, so each pad seals exactly one credential (a one-time pad
    # drawn from SHAKE-256 keyed by the Idempotency-Key, which the store never sees).
    return hashlib.shake_256(b"corral idempotency seal\0" + key.encode() + b"\0" + digest.encode()).digest(size)


_SECRETS = ("credential", "agent_token")
"""The response fields that are live secrets: a grant's credential, a check-in's agent token."""


def _seal(response: str, key: str, digest: str) -> str:
    """The response to record: a grant's ``credential`` (a check-in's ``agent_token``) sealed with the
    Idempotency-Key, so the store (which keeps only token hashes) never holds a live token; a replay
    with the key unseals it. The two never come in one response, so each pad seals one secret."""
    try:
        doc = json.loads(response)
    except ValueError:
        return response
    if not isinstance(doc, dict):
        return response
    found = [name for name in _SECRETS if isinstance(doc.get(name), str)]
    if not found:
        return response
    for name in found:
        plain = doc[name].encode()
        doc[name] = {"sealed": bytes(a ^ b for a, b in zip(plain, _pad(key, digest, len(plain)), strict=True)).hex()}
    return json.dumps(doc, sort_keys=True, default=str)


def _unseal(response: str, key: str, digest: str) -> str:
    """The recorded response as first answered (a sealed secret opened with the presented key)."""
    try:
        doc = json.loads(response)
    except ValueError:
        return response
    if not isinstance(doc, dict):
        return response
    found = [name for name in _SECRETS if isinstance(doc.get(name), dict) and isinstance(doc[name].get("sealed"), str)]
    if not found:
        return response
    for name in found:
        data = bytes.fromhex(doc[name]["sealed"])
        doc[name] = bytes(a ^ b for a, b in zip(data, _pad(key, digest, len(data)), strict=True)).decode()
    return json.dumps(doc, sort_keys=True, default=str)


def _conflict(error: CorralError) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": error.to_dict()}, status_code=409)


class Guard:
    """The bearer token (constant-time) on ``/api`` and ``/metrics``. The ``Host`` and ``Origin`` checks are in front of
    it (:class:`runner.mcp.hosts.HostGuard`)."""

    def __init__(self, app: Any, options: Options) -> None:
        self.app, self.options = app, options

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        import hmac

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        token = self.options.token
        if token is not None and (scope["path"].startswith("/api/") or scope["path"] == METRICS_PATH):
            scheme, _, value = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
                from starlette.responses import JSONResponse

                denied = CorralError("a bearer token is required (Authorization: Bearer ...)", code="unauthorized")
                response = JSONResponse(
                    {"error": denied.to_dict()}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

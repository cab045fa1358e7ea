"""OpenTelemetry traces: the one seam between corral and the OpenTelemetry SDK (``corral[otel]``).

Off unless the standard ``OTEL_*`` variables ask for traces: ``OTEL_TRACES_EXPORTER`` names an exporter
other than ``none`` (``otlp``, ``console``), or ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; ``OTEL_SDK_DISABLED=true`` wins over both. While off,
not one ``opentelemetry`` module is imported (cold start: this module imports only ``os``) and
every call here is a function call that returns a shared no-op object.

What is traced (``docs/observability.md`` lists every span and attribute):

- a plan run (``plan {recipe}``), each step (``step {do}``), each transition (``transition
  {machine}:{trigger}``, with each guard's verdict) and each effect (``effect {name}``);
- an agent run (``invoke_agent {agent}``, OpenTelemetry's GenAI conventions), emitted by the process
  host's supervisor, which watched it, under the span that prompted it (``traceparent`` in its job);
  the tool calls its driver reports as ``execute_tool {tool}``;
- an HTTP request (``{METHOD} {route}``) and an MCP tool call (``tools/call {tool}``).

A plan's trace id is derived from the plan (:func:`plan_ids`), so a plan resumed by another process,
on another machine, continues the same trace: its first run's span is the trace's root (its span id
derived too), every later run's span a child of it. What started a run (an HTTP request, an MCP
call) is linked, not the parent.

Invariant: no attribute holds a secret (a token, a credential, a fence secret, an agent token) or an
agent's text (a prompt, a reply, a message, a checkpoint): attributes are names, ids, states, codes
and counts. Errors are recorded as ``error.type`` (a stable code), never an exception's message.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: this module stays on the cold path of every command
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

TRACER_NAME = "corral"
EXPORTERS = ("otlp", "console")
PROVIDERS = {"claude": "anthropic", "codex": "openai"}
"""The GenAI provider behind a driver (``gen_ai.provider.name``), where corral knows it."""

_UNSET: Any = object()


class _State:
    """The process's decision: ``tracer`` is unset until the first :func:`active`, then None (off) or the SDK's."""

    tracer: Any = _UNSET
    provider: Any = None
    forced: Any = None
    """The ids the next root span is given (a ContextVar, made with the first provider: contextvars and
    hashlib stay off the cold path)."""


_state = _State()


def configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces (nothing is imported to tell)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER")
    if exporters is not None and exporters.strip():
        return any(name.strip() not in ("", "none") for name in exporters.split(","))
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def active() -> bool:
    """Whether spans are recorded in this process (decided once, at the first call)."""
    tracer = _state.tracer
    if tracer is _UNSET:
        tracer = _start()
    return tracer is not None


def _start() -> Any:
    _state.tracer = None
    if not configured():
        return None
    try:
        provider = _provider_from_env()
    except ImportError as exc:
        from runner.log import get_logger

        get_logger(__name__).warning(
            "OTEL_* asks for traces, but corral[otel] is not installed (%s): traces are off", exc.name
        )
        return None
    except ValueError as exc:
        from runner.log import get_logger

        get_logger(__name__).warning("OTEL_* is not a configuration corral can use (%s): traces are off", exc)
        return None
    _use(provider)
    return _state.tracer


def _provider_from_env() -> Any:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    names = [n.strip() for n in (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    provider = new_provider()
    for name in names:
        if name == "none":
            continue
        if name not in EXPORTERS:
            raise ValueError(f"OTEL_TRACES_EXPORTER names {name!r}; corral exports to {', '.join(EXPORTERS)}")
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    return provider


def _exporter(name: str) -> Any:
    if name == "console":
        import sys

        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)  # stdout is the command's answer (--json)
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    ).strip() or "http/protobuf"
    if protocol == "grpc":  # opentelemetry-exporter-otlp-proto-grpc, installed on its own (grpcio is large)
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
            OTLPSpanExporter as Grpc,  # an optional extra of its own: not installed where mypy runs
        )

        return Grpc()
    if protocol != "http/protobuf":
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}; corral speaks http/protobuf or grpc")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # reads the endpoint, headers, timeout and compression from OTEL_*


def new_provider() -> Any:
    """A TracerProvider with corral's resource (``service.name``: ``$OTEL_SERVICE_NAME`` or ``corral``)
    and the id generator that gives a plan's first run its derived ids; no processor yet."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    from runner._version import __version__

    if _state.forced is None:
        import contextvars

        _state.forced = contextvars.ContextVar("corral_forced_ids", default=None)
    forced_ids = _state.forced

    class PlanIds(RandomIdGenerator):
        """Random ids, except the pair a plan's root span is given (:func:`plan_ids`)."""

        def generate_trace_id(self) -> int:
            forced: tuple[int, int] | None = forced_ids.get()
            return forced[0] if forced is not None else super().generate_trace_id()

        def generate_span_id(self) -> int:
            forced: tuple[int, int] | None = forced_ids.get()
            if forced is not None:
                forced_ids.set(None)  # once: the plan's own span, not its children
                return forced[1]
            return super().generate_span_id()

    resource = Resource.create(
        {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "corral", "service.version": __version__}
    )
    return TracerProvider(resource=resource, id_generator=PlanIds())


def install(provider: Any) -> None:
    """Record spans through ``provider`` (a test's, with an in-memory exporter), whatever ``OTEL_*`` says."""
    _use(provider, set_global=False)


def _use(provider: Any, *, set_global: bool = True) -> None:
    from runner._version import __version__

    _state.provider = provider
    _state.tracer = provider.get_tracer(TRACER_NAME, __version__)
    if set_global:
        from opentelemetry import trace

        trace.set_tracer_provider(provider)  # the MCP SDK's own spans, if any, go the same way


def reset() -> None:
    """Forget the decision (tests): the next :func:`active` reads ``OTEL_*`` again."""
    _state.tracer, _state.provider = _UNSET, None


def flush(timeout_ms: int = 5000) -> None:
    """Export what is buffered now (a process about to ``os._exit``: the supervisor)."""
    if _state.provider is not None:
        _state.provider.force_flush(timeout_ms)


# --- spans ---------------------------------------------------------------------------------------------------


class _NullSpan:
    """What a span is while tracing is off: every method does nothing."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        return None

    def update_name(self, name: str) -> None:
        return None

    def is_recording(self) -> bool:
        return False

    def __enter__(self) -> _NullSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


NULL = _NullSpan()


class _Span:
    """A span made current for the ``with`` block; an exception ends it with ``error.type``, never a message."""

    __slots__ = ("_cm", "_forced", "_kw", "_name", "_span")

    def __init__(self, name: str, kw: dict[str, Any], forced: tuple[int, int] | None) -> None:
        self._name, self._kw, self._forced = name, kw, forced
        self._cm: Any = None
        self._span: Any = None

    def __enter__(self) -> Any:
        token = _state.forced.set(self._forced) if self._forced is not None and _state.forced is not None else None
        try:
            self._cm = _state.tracer.start_as_current_span(
                self._name, record_exception=False, set_status_on_exception=False, end_on_exit=True, **self._kw
            )
            self._span = self._cm.__enter__()
        finally:
            if token is not None:
                _state.forced.reset(token)
        return self._span

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            mark_error(self._span, _error_type(exc))
        self._cm.__exit__(kind, exc, tb)


def _error_type(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else type(exc).__qualname__


def mark_error(span: Any, error_type: str) -> None:
    """End ``span`` in error: ``error.type`` is a stable code (never a message, which may quote input)."""
    if span is NULL or not span.is_recording():
        return
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR)


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: str = "internal",
    parent: Any = None,
    links: Sequence[Any] = (),
) -> Any:
    """A context manager: the span ``name`` (current inside the block), or :data:`NULL` while off.

    ``kind`` is ``internal``, ``server`` or ``client``; ``parent`` an OpenTelemetry context (from
    :func:`extract`) instead of the current one."""
    if not active():
        return NULL
    return _Span(name, _options(attributes, kind, parent, links), None)


def _options(attributes: Mapping[str, Any] | None, kind: str, parent: Any, links: Sequence[Any]) -> dict[str, Any]:
    from opentelemetry.trace import SpanKind

    kw: dict[str, Any] = {"kind": {"server": SpanKind.SERVER, "client": SpanKind.CLIENT}.get(kind, SpanKind.INTERNAL)}
    if attributes:
        kw["attributes"] = _clean(attributes)
    if parent is not None:
        kw["context"] = parent
    if links:
        kw["links"] = list(links)
    return kw


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Only the values OpenTelemetry takes (None dropped); a list becomes a tuple of strings."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            out[key] = tuple(str(v) for v in value)
        elif isinstance(value, (str, bool, int, float)):
            out[key] = value
        else:
            out[key] = str(value)
    return out


def current() -> Any:
    """The current OpenTelemetry context (to carry into a thread with :func:`attached`), or None while off."""
    if not active():
        return None
    from opentelemetry import context

    return context.get_current()


class attached:
    """Make ``ctx`` (from :func:`current`) the current context in this thread for the block."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._token: Any = None

    def __enter__(self) -> None:
        if self._ctx is not None:
            from opentelemetry import context

            self._token = context.attach(self._ctx)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            from opentelemetry import context

            context.detach(self._token)


def traceparent() -> str | None:
    """The current span as a W3C ``traceparent`` (to hand to another process), or None."""
    if not active():
        return None
    from opentelemetry import trace

    found = trace.get_current_span().get_span_context()
    if not found.is_valid:
        return None
    return f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"


def extract(carrier: Mapping[str, Any] | None) -> Any:
    """The context a W3C carrier (``traceparent``/``tracestate``: headers, an MCP ``_meta``) names, or None."""
    if not carrier or not active():
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    found = {k.lower(): str(v) for k, v in carrier.items() if k.lower() in ("traceparent", "tracestate")}
    if "traceparent" not in found:
        return None
    ctx = TraceContextTextMapPropagator().extract(found)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def link_to_current() -> list[Any]:
    """A link to the current span (what started a plan run), or none."""
    from opentelemetry import trace

    found = trace.get_current_span().get_span_context()
    return [trace.Link(found)] if found.is_valid else []


# --- plans ---------------------------------------------------------------------------------------------------


def plan_ids(plan_id: str, salt: str) -> tuple[int, int]:
    """The trace id and root span id of a plan: derived from its id and its content digest (``salt``),
    so every process that runs it continues one trace, and two stores' plans of one id do not meet."""
    import hashlib

    digest = hashlib.sha256(f"corral plan\0{plan_id}\0{salt}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def plan_span(plan_id: str, salt: str, recipe: str, *, first: bool, attributes: Mapping[str, Any]) -> Any:
    """The span of one run of a plan: the trace's root on its ``first`` run, else a child of that root."""
    if not active():
        return NULL
    from opentelemetry import trace
    from opentelemetry.context import Context

    trace_id, span_id = plan_ids(plan_id, salt)
    links = link_to_current()
    if first:
        return _Span(f"plan {recipe}", _options(attributes, "internal", Context(), links), (trace_id, span_id))
    root = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    parent = trace.set_span_in_context(trace.NonRecordingSpan(root), Context())
    return _Span(f"plan {recipe}", _options(attributes, "internal", parent, links), None)


# --- transitions ---------------------------------------------------------------------------------------------


def guard_verdicts(span: Any, chosen: Any, rejections: Iterable[tuple[str, Any]]) -> None:
    """Each guard's verdict on ``span``: the refusals met on the way (``name``, the rejection's code),
    then the guards of the transition taken (all passed). Two parallel lists, in the order they ran."""
    names: list[str] = []
    verdicts: list[str] = []
    for name, rejection in rejections:
        names.append(name)
        verdicts.append(str(getattr(rejection, "code", "refused")))
    if chosen is not None:
        for ref in chosen.guards:
            names.append(ref.name)
            verdicts.append("pass")
    if names:
        span.set_attribute("corral.guard.names", tuple(names))
        span.set_attribute("corral.guard.verdicts", tuple(verdicts))


# --- agent runs ----------------------------------------------------------------------------------------------


def agent_run(
    job: Mapping[str, Any], started_ns: int, ended_ns: int, code: int, result: Mapping[str, Any] | None
) -> None:
    """Record one finished agent run (the supervisor, which watched it) as ``invoke_agent {agent}``, a
    child of the span that prompted it (``job["traceparent"]``), with the tool calls the driver read."""
    carrier = {"traceparent": str(job["traceparent"])}
    parent = extract(carrier)
    if parent is None:
        return
    driver = str(job.get("driver") or "")
    spec = job.get("spec") or {}
    agent = str(job.get("agent") or job.get("pane_id") or "agent")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.agent.id": str(job.get("pane_id") or ""),
        "gen_ai.provider.name": PROVIDERS.get(driver),
        "gen_ai.system": PROVIDERS.get(driver),
        "gen_ai.request.model": spec.get("model") if isinstance(spec.get("model"), str) else None,
        "corral.agent.kind": job.get("kind"),
        "corral.agent.driver": driver or None,
        "corral.agent.role": spec.get("role"),
        "corral.agent.run": job.get("run"),
        "corral.agent.exit_status": code,
    }
    tools: list[str] = []
    if result is not None:
        usage = result.get("usage") or {}
        attributes["gen_ai.usage.input_tokens"] = usage.get("input_tokens")
        attributes["gen_ai.usage.output_tokens"] = usage.get("output_tokens")
        attributes["corral.usage.cache_read_tokens"] = usage.get("cache_read_tokens")
        attributes["corral.usage.cache_creation_tokens"] = usage.get("cache_creation_tokens")
        attributes["corral.usage.cost_usd"] = result.get("cost_usd")
        attributes["corral.agent.turns"] = result.get("turns")
        attributes["corral.agent.tool_calls"] = result.get("tool_calls")
        session = result.get("session_id")
        attributes["gen_ai.conversation.id"] = session if isinstance(session, str) else None
        tools = [str(t) for t in result.get("tools") or ()]
    from opentelemetry.trace import SpanKind, StatusCode

    tracer = _state.tracer
    run = tracer.start_span(
        f"invoke_agent {agent}",
        context=parent,
        kind=SpanKind.CLIENT,
        attributes=_clean(attributes),
        start_time=started_ns,
    )
    failed = code != 0 or (result is not None and result.get("error") is not None)
    if failed:
        run.set_attribute("error.type", "agent_run_failed")
        run.set_status(StatusCode.ERROR)
    from opentelemetry import trace

    inside = trace.set_span_in_context(run)
    for tool in tools:
        # The CLI's output says which tools ran, in order, not when: each is shown at the run's end.
        call = tracer.start_span(
            f"execute_tool {tool}",
            context=inside,
            kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool},
            start_time=ended_ns,
        )
        call.end(end_time=ended_ns)
    run.end(end_time=ended_ns)

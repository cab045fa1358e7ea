"""A real OTLP/HTTP trace receiver on loopback, for the tracing tests of other processes (a supervisor,
``corral serve``, ``corral mcp``): it decodes each ``POST /v1/traces`` (protobuf) into plain spans.

``Collector.endpoint`` is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes; ``spans()`` every span received so
far, as :class:`Span` records comparable with the SDK's in-memory ones (ids as integers)."""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    attributes: dict[str, Any] = field(default_factory=dict)
    kind: str = ""
    status: str = ""
    links: tuple[int, ...] = ()
    """The span ids this span links to."""
    start_ns: int = 0
    end_ns: int = 0


def _value(any_value: Any) -> Any:
    which = any_value.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    return getattr(any_value, which) if which else None


class Collector:
    def __init__(self) -> None:
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector._add(request)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _add(self, request: Any) -> None:
        from opentelemetry.proto.trace.v1.trace_pb2 import Span as Proto

        found = []
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for s in scope.spans:
                    found.append(
                        Span(
                            name=s.name,
                            trace_id=int.from_bytes(s.trace_id, "big"),
                            span_id=int.from_bytes(s.span_id, "big"),
                            parent_id=int.from_bytes(s.parent_span_id, "big") if s.parent_span_id else None,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            kind=Proto.SpanKind.Name(s.kind),
                            status="ERROR" if s.status.code == 2 else "",
                            links=tuple(int.from_bytes(link.span_id, "big") for link in s.links),
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self._spans.extend(found)

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, name_start: str, timeout: float = 30.0) -> list[Span]:
        """The spans received once one whose name starts with ``name_start`` is among them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.spans()
            if any(s.name.startswith(name_start) for s in found):
                return found
            time.sleep(0.05)
        raise AssertionError(f"no span {name_start!r} within {timeout} s; got {[s.name for s in self.spans()]}")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def from_sdk(span: Any) -> Span:
    """An SDK ``ReadableSpan`` (the in-memory exporter's) as a :class:`Span`."""
    context = span.get_span_context()
    return Span(
        name=span.name,
        trace_id=context.trace_id,
        span_id=context.span_id,
        parent_id=span.parent.span_id if span.parent is not None else None,
        attributes=dict(span.attributes or {}),
        kind=str(span.kind.name),
        status="ERROR" if span.status.status_code.name == "ERROR" else "",
        links=tuple(link.context.span_id for link in span.links),
        start_ns=span.start_time or 0,
        end_ns=span.end_time or 0,
    )

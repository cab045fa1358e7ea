"""The host names an HTTP server of corral answers (DNS rebinding): the ``Host`` and ``Origin`` checks.

Shared by ``corral serve`` and ``corral mcp --http``, in front of everything else (the bearer token,
the body cap, every route), so a forged name reaches no handler, with or without a token:

- ``Host`` must name the listen address, ``localhost``, ``127.0.0.1`` or ``[::1]`` (on loopback), or
  a name given with ``--allow-host``; any port. Anything else (no ``Host`` at all included) is
  ``421 host_not_allowed``. A page on ``evil.example`` that resolves to 127.0.0.1 sends
  ``Host: evil.example``, so it is refused before any handler runs.
- ``Origin``, when a browser sends one, must be ``http(s)://<an allowed name>[:port]``, else ``403``
  (``origin_forbidden``, the code ``corral serve`` has always answered).
- On a unix socket the ``Host`` is not checked (no browser, hence no rebinding page, reaches a 0600
  socket); an ``Origin`` must still name an allowed host or the request's own ``Host``.

A pure ASGI middleware (Starlette's ``BaseHTTPMiddleware`` would buffer the SSE streams).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def host_name(value: str) -> str:
    """The name in a ``Host`` header or an authority: brackets and port removed, lowercased."""
    value = value.strip().lower()
    if value.startswith("["):
        inside, sep, _ = value[1:].partition("]")
        return inside if sep else ""
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return name
    return value if ":" not in value else ""


def check_allow_host(name: str) -> str:
    """An ``--allow-host`` name, normalised: a DNS name or an IP address, without a port.

    Raises:
        InputError: ``allow_host`` when it is not one.
    """
    from runner.errors import InputError

    given = name.strip().lower()
    bare = given[1:-1] if given.startswith("[") and given.endswith("]") else given
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    labels = bare.split(".")
    if (
        not bare
        or len(bare) > 253
        or not all(
            label and len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii() for label in labels
        )
    ):
        raise InputError("allow_host", f"{name!r} is not a host name or an IP address (no port, no scheme)")
    return bare


def allowed_names(listen_host: str, loopback: bool, extra: Iterable[str] = ()) -> frozenset[str]:
    """What a server listening on ``listen_host`` answers: its address, ``localhost`` (and the loopback
    addresses when it listens on loopback), and the ``--allow-host`` names."""
    names = {"localhost", *(check_allow_host(n) for n in extra)}
    if listen_host:
        names.add(host_name(f"[{listen_host}]" if ":" in listen_host else listen_host))
    if loopback:
        names.update(LOOPBACK_NAMES)
    return frozenset(names)


class HostGuard:
    """``421 host_not_allowed`` for a ``Host``, ``403 origin_forbidden`` for an ``Origin`` not allowed.

    Args:
        app: the ASGI app behind it.
        names: the allowed names (:func:`allowed_names`).
        check_host: False on a unix socket (the ``Origin`` is still checked).
    """

    def __init__(self, app: Any, names: frozenset[str], *, check_host: bool = True) -> None:
        self.app, self.names, self.check_host = app, names, check_host

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host: str | None = None
        origin: str | None = None
        for key, value in scope.get("headers") or []:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        name = host_name(host or "")
        if self.check_host and name not in self.names:
            shown = (host or "")[:200]
            await _refuse(
                send,
                421,
                "host_not_allowed",
                f"this server does not answer the host {shown!r} (start it with --allow-host NAME to serve it)",
                host=shown,
            )
            return
        if origin is not None and not self._origin_allowed(origin, name):
            await _refuse(send, 403, "origin_forbidden", f"requests from the page at {origin[:200]!r} are not allowed")
            return
        await self.app(scope, receive, send)

    def _origin_allowed(self, origin: str, host: str) -> bool:
        try:
            parts = urlsplit(origin.strip())
            parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.username is not None:
            return False
        name = host_name(parts.netloc)
        return bool(name) and (name in self.names or (not self.check_host and name == host))


async def _refuse(send: Any, status: int, code: str, message: str, **details: Any) -> None:
    """The ``{"error": {code, message, details}}`` every corral HTTP error has."""
    body = json.dumps({"error": {"code": code, "message": message, "details": details}}, sort_keys=True).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

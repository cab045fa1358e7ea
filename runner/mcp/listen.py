"""Where a server listens (``--listen``), its bearer token file, and the socket bound before it serves.

Shared by ``corral mcp --http`` and ``corral serve`` (the HTTP surface builds on the MCP one: its routes
call the same tools). ``HOST:PORT`` (``[::1]:PORT``) or ``unix:///absolute/path``; a unix socket is
created under umask 077 (0600, no window in which another user could connect); a token file must be
private (no group or other bits) and hold 16+ characters.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.errors import InputError


class Endpoint:
    """Where the HTTP server listens: ``tcp`` host and port, or a ``unix`` socket path."""

    def __init__(self, kind: str, host: str = "", port: int = 0, path: str = "") -> None:
        self.kind, self.host, self.port, self.path = kind, host, port, path

    @property
    def loopback(self) -> bool:
        if self.kind == "unix":
            return True
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_listen(listen: str) -> Endpoint:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) or ``unix:///absolute/path``.

    Raises:
        InputError: ``listen`` naming what is wrong.
    """
    if listen.startswith("unix://"):
        path = listen[len("unix://") :]
        if not path.startswith("/"):
            raise InputError("listen", f"{listen!r}: a unix socket is unix:///absolute/path")
        return Endpoint("unix", path=path)
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError("listen", f"{listen!r} is not HOST:PORT or unix:///path")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host:
        raise InputError("listen", f"{listen!r} names no host (127.0.0.1 for loopback)")
    return Endpoint("tcp", host=host, port=int(port))


def read_token(path: Path) -> str:
    """The bearer token in ``path``: a private file (not group or world readable), 16+ characters.

    Raises:
        InputError: ``auth_token_invalid`` when the file is missing, readable by others, or too short.
    """
    try:
        info = path.stat()
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("auth_token_file", f"cannot read {path}: {exc}", code="auth_token_invalid") from None
    if info.st_mode & 0o077:
        raise InputError("auth_token_file", f"{path} is readable by others (chmod 600 it)", code="auth_token_invalid")
    if len(text) < 16 or not text.isprintable():
        raise InputError(
            "auth_token_file", f"{path} holds no token of 16 or more printable characters", code="auth_token_invalid"
        )
    return text


def hostport(sock: Any) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@contextlib.contextmanager
def bound(endpoint: Endpoint) -> Iterator[Any]:
    """The listening socket, bound before uvicorn starts; a unix socket is created 0600 (no window)."""
    import socket

    if endpoint.kind == "unix":
        path = endpoint.path
        with contextlib.suppress(FileNotFoundError):
            if not _is_socket(path):
                raise InputError("listen", f"{path} exists and is not a socket: refusing to replace it")
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            raise InputError("listen", f"cannot listen on {path}: {exc.strerror}") from None
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(128)
        try:
            yield sock
        finally:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
        return
    family = socket.AF_INET6 if ":" in endpoint.host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it a
    # keep-alive client waits out a delayed ACK (40 ms) for every small response.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((endpoint.host, endpoint.port))
    except OSError as exc:
        sock.close()
        raise InputError("listen", f"cannot listen on {endpoint.host}:{endpoint.port}: {exc.strerror}") from None
    sock.listen(128)
    try:
        yield sock
    finally:
        sock.close()


def _is_socket(path: str) -> bool:
    import stat

    return stat.S_ISSOCK(os.lstat(path).st_mode)


def serving(listen: str, auth_token_file: Path | None, max_request_size: int) -> tuple[Endpoint, str | None]:
    """An HTTP server's endpoint and bearer token, checked: off loopback a token is required.

    Raises:
        InputError: ``auth_token_required``, ``auth_token_invalid``, a bad ``listen`` or body size.
    """
    endpoint = parse_listen(listen)
    token = read_token(auth_token_file) if auth_token_file is not None else None
    if endpoint.kind == "tcp" and not endpoint.loopback and token is None:
        raise InputError(
            "listen",
            f"{listen} is not a loopback address: give --auth-token-file FILE (clients send Authorization: Bearer)",
            code="auth_token_required",
        )
    if not 1024 <= max_request_size <= 1 << 30:
        raise InputError("max_request_size", f"{max_request_size} is not a body size from 1024 bytes to 1 GiB")
    return endpoint, token

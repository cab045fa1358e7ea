"""A throwaway PostgreSQL cluster for the tests: ``initdb`` into a temporary directory, a unix socket only.

Used by the test session (``tests/support/stores.py`` starts one when ``CORRAL_TEST_POSTGRES`` is not
set) and by ``.ci/run`` (``python -m tests.support.pgserver start DIR`` prints the libpq URL to export
as ``CORRAL_TEST_POSTGRES``; ``stop DIR`` stops it). The cluster listens on no TCP port
(``listen_addresses=''``), runs with ``fsync=off`` (a test cluster: speed over durability) and trusts
local connections. PostgreSQL refuses to run as root, so as root it is started as the ``postgres``
user (``runuser``), the directory handed over to that user first.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

BIN_DIRS = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")
SUPERUSER = "postgres"


def binary(name: str) -> str | None:
    """The path of a PostgreSQL server binary (``initdb``, ``pg_ctl``), or None if none is installed."""
    found = shutil.which(name)
    if found:
        return found
    for directory in BIN_DIRS:
        candidate = Path(directory) / name
        if candidate.is_file():
            return str(candidate)
    return None


def unavailable() -> str | None:
    """Why no cluster can be started here (None: one can)."""
    if binary("initdb") is None or binary("pg_ctl") is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SUPERUSER)
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", SUPERUSER, "--", *argv] if os.geteuid() == 0 else argv


def url(directory: Path) -> str:
    """The libpq URL of the cluster in ``directory`` (its socket lives there too)."""
    return f"postgresql://{SUPERUSER}@/postgres?host={quote(str(directory / 'socket'), safe='')}"


def start(directory: Path, *, durable: bool = False) -> str:
    """Create and start a cluster in ``directory`` (made if missing); its URL.

    ``durable``: a commit is acknowledged only once its WAL is written (``synchronous_commit`` on), so
    an acknowledged transaction survives the server's processes being killed (``restart``); ``fsync``
    stays off, which is safe for that: the kernel keeps what was written, only the processes die."""
    initdb, pg_ctl = binary("initdb"), binary("pg_ctl")
    assert initdb is not None and pg_ctl is not None, unavailable()
    data, socket = directory / "data", directory / "socket"
    directory.mkdir(parents=True, exist_ok=True)
    socket.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        owner = pwd.getpwnam(SUPERUSER)
        for path in (directory, socket):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        directory.chmod(0o755)
        # The parents must be traversable by the server's user (a tmp dir of root's often is not).
        for parent in directory.parents:
            if parent == Path("/"):
                break
            mode = parent.stat().st_mode
            if not mode & 0o001:
                parent.chmod(mode | 0o001)
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True}
    done = subprocess.run(
        _as_owner([initdb, "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"]),
        check=False,
        **quiet,
    )
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed: {done.stderr.strip()}")
    options = f"-c listen_addresses='' -c unix_socket_directories='{socket}' -c fsync=off -c max_connections=200"
    options += " -c full_page_writes=off" if durable else " -c synchronous_commit=off -c full_page_writes=off"
    done = subprocess.run(
        _as_owner([pg_ctl, "-D", str(data), "-l", str(directory / "server.log"), "-o", options, "-w", "start"]),
        check=False,
        **quiet,
    )
    if done.returncode != 0:
        log = (directory / "server.log").read_text(errors="replace") if (directory / "server.log").exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log[-2000:]}")
    return url(directory)


def stop(directory: Path) -> None:
    """Stop the cluster in ``directory`` (fast shutdown); nothing if it is not running."""
    pg_ctl = binary("pg_ctl")
    data = directory / "data"
    if pg_ctl is None or not (data / "postmaster.pid").exists():
        return
    subprocess.run(
        _as_owner([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


def restart(directory: Path, mode: str = "immediate") -> None:
    """``pg_ctl restart -m <mode>`` (``immediate``: every server process killed, crash recovery on
    start), with the options it was started with (``postmaster.opts``; a stopped server is just
    started); returns once the server accepts connections."""
    pg_ctl = binary("pg_ctl")
    assert pg_ctl is not None, unavailable()
    done = subprocess.run(
        _as_owner(
            [pg_ctl, "-D", str(directory / "data"), "-l", str(directory / "server.log"), "-m", mode, "-w", "restart"]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pg_ctl restart failed: {done.stderr.strip()}")


def stop_now(directory: Path) -> None:
    """Kill the server at once (``-m immediate``), leaving it stopped."""
    pg_ctl = binary("pg_ctl")
    assert pg_ctl is not None, unavailable()
    subprocess.run(
        _as_owner([pg_ctl, "-D", str(directory / "data"), "-m", "immediate", "-w", "stop"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.support.pgserver start|stop DIR", file=sys.stderr)
        return 2
    directory = Path(argv[1]).absolute()
    if argv[0] == "start":
        print(start(directory))
    else:
        stop(directory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

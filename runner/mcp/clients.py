"""What a coordinator's MCP client needs to launch ``corral mcp``, and merging it into the client's file.

``corral mcp config`` (:mod:`runner.cli.mcp`) is the surface; this module owns the knowledge of each
client (where its configuration lives per scope, and the shape of its entry) and the careful write:

============  =========================================  ===========================================
client        project scope                              user scope
============  =========================================  ===========================================
claude-code   ``<dir>/.mcp.json``                        ``$CLAUDE_CONFIG_DIR/.claude.json``, else
                                                         ``~/.claude.json``
codex         ``<dir>/.codex/config.toml``               ``$CODEX_HOME/config.toml``, else
                                                         ``~/.codex/config.toml``
opencode      ``<dir>/opencode.json``                    ``$XDG_CONFIG_HOME/opencode/opencode.json``,
                                                         else ``~/.config/opencode/opencode.json``
============  =========================================  ===========================================

A merge changes the one ``corral`` entry and nothing else a program could read: JSON files are
loaded, the entry set and the document dumped again (indent 2, trailing newline); a TOML file is
edited as text (only the ``[mcp_servers.corral]`` table and its sub-tables are replaced, or the table
is appended) and the result is parsed again and compared with the original before it is written. A
file that does not parse is refused (``config_invalid``), and nothing is written. Writes are atomic.

Standard library only, and no import of the ``mcp`` SDK: this runs in a plain ``corral`` command.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from runner.errors import InputError, InvalidError

__all__ = [
    "CLIENTS",
    "SCOPES",
    "Client",
    "Outcome",
    "Setup",
    "corral_executable",
    "default_dir",
    "plan",
    "server_args",
    "write",
]

SCOPES: Final = ("project", "user")
OPENCODE_SCHEMA: Final = "https://opencode.ai/config.json"


@dataclass(frozen=True)
class Client:
    """One MCP client corral knows how to configure.

    Attributes:
        name: the ``--client`` value.
        format: ``json`` or ``toml``: how its file is read and merged.
        project: the file of project scope, relative to the project directory.
        user: the file of user scope, from the environment.
        entry: the ``corral`` entry for a command and its arguments.
        key: the path to the entry in the file (``("mcpServers", "corral")``).
        private_user_file: a new user-scope file is created 0600 (it holds the client's own state).
        skeleton: the keys a *new* file starts with besides the entry (OpenCode's ``$schema``).
    """

    name: str
    format: str
    project: str
    user: Callable[[Mapping[str, str]], Path]
    entry: Callable[[str, list[str]], dict[str, Any]]
    key: tuple[str, str]
    private_user_file: bool = False
    skeleton: Mapping[str, Any] | None = None


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def _claude_user(env: Mapping[str, str]) -> Path:
    # Claude Code keeps its global state (user-scope servers included) in .claude.json of its config
    # dir when CLAUDE_CONFIG_DIR is set, else in ~/.claude.json.
    configured = env.get("CLAUDE_CONFIG_DIR")
    return Path(configured).expanduser() / ".claude.json" if configured else _home(env) / ".claude.json"


def _codex_user(env: Mapping[str, str]) -> Path:
    configured = env.get("CODEX_HOME")
    return (Path(configured).expanduser() if configured else _home(env) / ".codex") / "config.toml"


def _opencode_user(env: Mapping[str, str]) -> Path:
    configured = env.get("XDG_CONFIG_HOME")
    base = Path(configured).expanduser() if configured and os.path.isabs(configured) else _home(env) / ".config"
    return base / "opencode" / "opencode.json"


CLIENTS: Final[dict[str, Client]] = {
    "claude-code": Client(
        name="claude-code",
        format="json",
        project=".mcp.json",
        user=_claude_user,
        entry=lambda command, args: {"type": "stdio", "command": command, "args": list(args)},
        key=("mcpServers", "corral"),
        private_user_file=True,
    ),
    "codex": Client(
        name="codex",
        format="toml",
        project=".codex/config.toml",
        user=_codex_user,
        entry=lambda command, args: {"command": command, "args": list(args)},
        key=("mcp_servers", "corral"),
    ),
    "opencode": Client(
        name="opencode",
        format="json",
        project="opencode.json",
        user=_opencode_user,
        entry=lambda command, args: {"type": "local", "command": [command, *args], "enabled": True},
        key=("mcp", "corral"),
        skeleton={"$schema": OPENCODE_SCHEMA},
    ),
}
"""The clients by ``--client`` name; a new client is one more entry here."""


@dataclass(frozen=True)
class Setup:
    """What ``corral mcp config`` would put where: the entry for one client and scope."""

    client: Client
    scope: str
    path: Path
    command: str
    args: list[str]

    @property
    def entry(self) -> dict[str, Any]:
        """The ``corral`` entry as the client reads it."""
        return self.client.entry(self.command, self.args)

    def snippet(self) -> str:
        """The entry in the file's own syntax, nested under its keys, ready to paste (ends with a newline)."""
        outer, name = self.client.key
        if self.client.format == "toml":
            return _toml_table(outer, name, self.entry, "\n")
        doc: dict[str, Any] = dict(self.client.skeleton or {})
        doc[outer] = {name: self.entry}
        return _dump_json(doc)


@dataclass(frozen=True)
class Outcome:
    """What a write did: ``changed`` is false when the file already held exactly this entry."""

    path: Path
    written: bool
    changed: bool


# --- what to launch -------------------------------------------------------------------------------------


def corral_executable(executable: str | None = None, which: Callable[[str], str | None] = shutil.which) -> str:
    """The absolute path of the installed ``corral``: the console script beside the running Python
    (``executable``, default ``sys.executable``: the same installation), else ``corral`` on ``PATH``.

    Raises:
        InvalidError: ``corral_not_installed`` when neither exists (``details.searched``).
    """
    python = executable if executable is not None else sys.executable
    searched: list[str] = []
    if python:
        beside = os.path.join(os.path.dirname(os.path.abspath(python)), "corral")
        searched.append(beside)
        if os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
    found = which("corral")
    searched.append("PATH")
    if found:
        return os.path.abspath(found)
    raise InvalidError(
        "no installed `corral` executable to name in the client's configuration (looked beside "
        f"{python or 'the running Python'} and on PATH); install corral as a package "
        "(`pip install corral`, `uv tool install corral`, or `pip install -e .` in a checkout) and run again",
        code="corral_not_installed",
        searched=searched,
    )


def server_args(home: str | os.PathLike[str] | None = None, store: str | None = None) -> list[str]:
    """The arguments of ``corral`` that start the server: ``["mcp"]``, after ``--home DIR`` and
    ``--store URL`` when given (a relative SQLite path made absolute: a client launches from its own
    working directory).

    Raises:
        InputError: ``store_url_password`` for a store URL that carries a password: a client's
            configuration file (and the server's argv) must never hold a secret.
    """
    args: list[str] = []
    if home is not None:
        args += ["--home", os.path.abspath(os.fspath(home))]
    if store is not None:
        _refuse_password(store)
        args += ["--store", _absolute_store(store)]
    return [*args, "mcp"]


def _refuse_password(url: str) -> None:
    try:
        parts = urlsplit(url)
        secret = bool(parts.password) or any(k.lower() == "password" for k, _ in parse_qsl(parts.query))
    except ValueError:  # urlsplit refuses the netloc (a bad IPv6 literal): judge the user info as text
        userinfo = url.split("//", 1)[-1].split("/", 1)[0].rpartition("@")[0]
        secret = ":" in userinfo
    if secret:
        raise InputError(
            "store",
            f"the store URL ({_scheme(url)}://…) carries a password, which would be written into the "
            "client's configuration file and the server's command line; give a URL without it and "
            "keep the password where the driver reads it (for PostgreSQL: ~/.pgpass or PGPASSFILE)",
            code="store_url_password",
        )


def _scheme(url: str) -> str:
    """A URL's scheme alone (what an error may show of a URL that holds a secret)."""
    found = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*):", url)
    return found.group(1) if found else "?"


def _absolute_store(url: str) -> str:
    """``sqlite:rel.db`` and bare relative paths as ``sqlite:///abs``; any other URL as given."""
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        if rest.startswith("//"):
            return url  # sqlite:///abs or sqlite://abs: absolute already
        return f"sqlite://{os.path.abspath(rest)}"
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", url):
        return url
    return f"sqlite://{os.path.abspath(url)}"


# --- where it goes --------------------------------------------------------------------------------------


def default_dir(cwd: str | os.PathLike[str] | None = None) -> Path:
    """The project directory: the git top level holding ``cwd`` (a ``.git`` directory or file of a
    linked worktree), else ``cwd`` itself."""
    start = Path(os.path.abspath(cwd if cwd is not None else os.getcwd()))
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


def plan(
    client: str,
    scope: str,
    command: str,
    args: list[str],
    directory: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Setup:
    """The setup for ``client`` at ``scope``: which file, and the entry naming ``command args``.

    Raises:
        InputError: ``input_invalid`` for an unknown client or scope.
    """
    known = CLIENTS.get(client)
    if known is None:
        raise InputError("client", f"unknown client {client!r} (expected one of {', '.join(CLIENTS)})")
    if scope not in SCOPES:
        raise InputError("scope", f"unknown scope {scope!r} (expected one of {', '.join(SCOPES)})")
    env = os.environ if environ is None else environ
    if scope == "user":
        path = known.user(env)
    else:
        path = Path(os.path.abspath(directory if directory is not None else default_dir())) / known.project
    return Setup(known, scope, Path(os.path.abspath(path)), command, list(args))


# --- the careful write ----------------------------------------------------------------------------------


def write(setup: Setup) -> Outcome:
    """Merge the setup's entry into its file, atomically; nothing else in the file changes.

    The file is written only when its entry differs (``changed``): saying it twice writes once. A
    symlink is written through (its target replaced, the link kept); the file's mode is kept, a new
    one is 0600 for a private user-scope file and 0644 otherwise; missing parent directories are
    created (0700 at user scope).

    Raises:
        InvalidError: ``config_invalid`` when the existing file is not a regular file, not UTF-8, or
            does not parse (``details``: ``path``, ``line``, ``column``); ``config_unmergeable`` when
            a TOML file defines the entry in a way a textual edit cannot replace; ``config_unwritable``
            when the file or its directory cannot be written. Nothing is written.
    """
    target = Path(os.path.realpath(setup.path)) if setup.path.is_symlink() else setup.path
    existing = _read(target)
    if setup.client.format == "toml":
        merged = _merge_toml(existing, setup, target)
    else:
        merged = _merge_json(existing, setup, target)
    if merged is None:
        return Outcome(setup.path, written=False, changed=False)
    private = setup.scope == "user" and setup.client.private_user_file
    try:
        _replace(target, merged, 0o600 if private else 0o644, 0o700 if setup.scope == "user" else 0o777)
    except OSError as exc:
        raise InvalidError(
            f"cannot write {target}: {exc.strerror or exc}; fix the directory (or name another --dir) and "
            "run again; the file is as it was",
            code="config_unwritable",
            path=str(target),
        ) from None
    return Outcome(setup.path, written=True, changed=True)


def _read(path: Path) -> str | None:
    """The file's text, or None when there is none."""
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # no such file (a parent is missing or a file)
        return None
    except OSError as exc:
        raise _invalid(path, f"unreadable ({exc.strerror or exc})", None, None) from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidError(
            f"{path} is not a regular file; move it away or name another --dir; nothing was written",
            code="config_invalid",
            path=str(path),
            line=None,
            column=None,
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _invalid(path, f"unreadable ({exc.strerror or exc})", None, None) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _invalid(path, "not UTF-8", line, exc.start - data.rfind(b"\n", 0, exc.start)) from None


def _invalid(path: Path, what: str, line: int | None, column: int | None) -> InvalidError:
    where = f"{path}:{line}:{column}" if line is not None and column is not None else str(path)
    return InvalidError(
        f"{where}: {what}; fix the file (or move it away) and run again; nothing was written",
        code="config_invalid",
        path=str(path),
        line=line,
        column=column,
    )


def _merge_json(existing: str | None, setup: Setup, path: Path) -> str | None:
    outer, name = setup.client.key
    entry = setup.entry
    if existing is None or not existing.strip():
        doc: dict[str, Any] = dict(setup.client.skeleton or {})
        doc[outer] = {name: entry}
        return _dump_json(doc)
    try:
        doc = json.loads(existing)
    except json.JSONDecodeError as exc:
        raise _invalid(path, f"not valid JSON ({exc.msg})", exc.lineno, exc.colno) from None
    if not isinstance(doc, dict):
        raise _invalid(path, "the document is not a JSON object", 1, 1)
    servers = doc.setdefault(outer, {})
    if not isinstance(servers, dict):
        raise _invalid(path, f"{outer!r} is not a JSON object", None, None)
    if servers.get(name) == entry:
        return None
    servers[name] = entry
    return _dump_json(doc)


def _dump_json(doc: Any) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_TOML_WHERE = re.compile(r"\(at line (\d+), column (\d+)\)")


def _merge_toml(existing: str | None, setup: Setup, path: Path) -> str | None:
    outer, name = setup.client.key
    entry = setup.entry
    text = existing or ""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_WHERE.search(str(exc))
        line, column = (int(found.group(1)), int(found.group(2))) if found else (text.count("\n") + 1, None)
        raise _invalid(path, f"not valid TOML ({_TOML_WHERE.sub('', str(exc)).strip()})", line, column) from None
    servers = before.get(outer)
    if isinstance(servers, dict) and servers.get(name) == entry:
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    merged = _replace_tables(text, (outer, name), _toml_table(outer, name, entry, newline), newline)
    try:
        after = tomllib.loads(merged)
    except tomllib.TOMLDecodeError:
        after = None
    # Invariant: the write changes the entry and nothing else a reader of the file could see.
    if (
        after is None
        or after.get(outer, {}).get(name) != entry
        or _canonical(_without(after, outer, name)) != _canonical(_without(before, outer, name))
    ):
        raise InvalidError(
            f"{path} defines {outer}.{name} in a way corral cannot replace as text (an inline table, "
            f"dotted keys, or a [{outer}.{name}] header inside a multi-line string); replace that "
            f"definition by hand with:\n{_toml_table(outer, name, entry, chr(10))}nothing was written",
            code="config_unmergeable",
            path=str(path),
        )
    return merged


def _canonical(doc: Any) -> str:
    """A document as comparable text (``nan`` equals ``nan``; dates as their text; key order ignored)."""
    return json.dumps(doc, sort_keys=True, default=str)


def _without(doc: dict[str, Any], outer: str, name: str) -> dict[str, Any]:
    """``doc`` without ``outer.name`` (and without ``outer`` if that leaves it empty)."""
    rest = copy.deepcopy(doc)
    servers = rest.get(outer)
    if isinstance(servers, dict):
        servers.pop(name, None)
        if not servers:
            del rest[outer]
    return rest


def _replace_tables(text: str, prefix: tuple[str, ...], table: str, newline: str) -> str:
    """``text`` with every table under ``prefix`` (its header, keys and sub-tables) replaced by
    ``table`` where the first one stood, or ``table`` appended. Comments and blank lines after the last
    key of a removed table stay (they belong to what comes next), unless another removed table follows."""
    lines = text.splitlines(keepends=True)
    headers = [(i, path) for i, line in enumerate(lines) if (path := _header_path(line)) is not None]
    out: list[str] = []
    placed = False
    position = 0
    for n, (start, header) in enumerate(headers):
        end = headers[n + 1][0] if n + 1 < len(headers) else len(lines)
        if header[: len(prefix)] != prefix:
            continue
        out += lines[position:start]
        if not placed:
            out.append(table)
            placed = True
        if n + 1 < len(headers) and headers[n + 1][1][: len(prefix)] == prefix:
            position = end  # what lies between two of the replaced tables goes with them
            continue
        last = start
        for i in range(start, end):
            if lines[i].strip() and not lines[i].lstrip().startswith("#"):
                last = i
        position = last + 1
    out += lines[position:]
    merged = "".join(out)
    if placed:
        return merged
    if merged and not merged.endswith("\n"):
        merged += newline
    if merged.strip() and not merged.endswith(newline * 2):
        merged += newline
    return merged + table


def _header_path(line: str) -> tuple[str, ...] | None:
    """The key path of a ``[table]`` or ``[[array]]`` header line, or None for any other line.

    The line alone is parsed by tomllib, so quoting (``[mcp_servers."corral"]``), spacing and a
    trailing comment are read exactly as TOML reads them.
    """
    if not line.lstrip().startswith("["):
        return None
    try:
        doc: Any = tomllib.loads(line.strip())
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    while isinstance(doc, dict) and len(doc) == 1:
        key, doc = next(iter(doc.items()))
        path.append(key)
        if isinstance(doc, list) and len(doc) == 1:
            doc = doc[0]
    return tuple(path) if path and doc == {} else None


def _toml_table(outer: str, name: str, entry: Mapping[str, Any], newline: str) -> str:
    lines = [f"[{_toml_key(outer)}.{_toml_key(name)}]"]
    lines += [f"{_toml_key(key)} = {_toml_value(value)}" for key, value in entry.items()]
    return newline.join(lines) + newline


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")  # the entries hold only the above


def _toml_string(value: str) -> str:
    """A TOML basic string: backslash, quote and every control character escaped."""
    out = []
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _replace(path: Path, text: str, new_mode: int, dir_mode: int) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file beside it, fsync, rename, fsync of the
    directory. An existing file's mode is kept."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a path that is not valid UTF-8 (surrogate escapes) in the entry
        raise InvalidError(
            f"the entry for {path} holds a path that is not valid UTF-8; install corral under a UTF-8 path",
            code="config_invalid",
            path=str(path),
        ) from None
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = new_mode
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)

"""What a coordinator's MCP client needs to launch ``corral mcp``, and where that goes, per client.

``corral mcp config`` (:mod:`runner.cli.mcp`) is the surface; this module owns the knowledge of each
client (where its configuration lives per scope, the shape of its entry), what to launch (the
installed ``corral`` and its arguments), and the policy of the write (modes, symlinks, directories);
:mod:`runner.mcp.configfile` does the merge itself:

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

A merge changes the one ``corral`` entry and nothing else a program could read, and refuses a file
that does not parse (``config_invalid``); writes are atomic. Nothing secret is ever written: a store
URL with a password is refused (``store_url_password``).

Standard library only, and no import of the ``mcp`` SDK: this runs in a plain ``corral`` command.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from runner.errors import InputError, InvalidError
from runner.mcp import configfile

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
            return configfile.toml_table(outer, name, self.entry, "\n")
        doc: dict[str, Any] = dict(self.client.skeleton or {})
        doc[outer] = {name: self.entry}
        return configfile.dump_json(doc)


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
    existing = configfile.read(target)
    if setup.client.format == "toml":
        merged = configfile.merge_toml(existing, setup.client.key, setup.entry, target)
    else:
        merged = configfile.merge_json(existing, setup.client.key, setup.entry, target, setup.client.skeleton)
    if merged is None:
        return Outcome(setup.path, written=False, changed=False)
    private = setup.scope == "user" and setup.client.private_user_file
    try:
        configfile.replace(target, merged, 0o600 if private else 0o644, 0o700 if setup.scope == "user" else 0o777)
    except OSError as exc:
        raise InvalidError(
            f"cannot write {target}: {exc.strerror or exc}; fix the directory (or name another --dir) and "
            "run again; the file is as it was",
            code="config_unwritable",
            path=str(target),
        ) from None
    return Outcome(setup.path, written=True, changed=True)

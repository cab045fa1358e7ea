"""Agent kinds: the fixed command a prompt runs, from built-ins and ``agents.yaml`` files.

Built-ins: ``claude`` (Claude Code, driver ``claude``; the only kind taking ``--effort``), ``codex``
(``codex exec``, driver ``codex``) and ``script`` (the bundled deterministic demo agent). A kind names
its driver (:mod:`runner.agents.drivers`), which builds each run's argv by role and reads its output.
``$CORRAL_HOME/agents.yaml`` and then ``./.corral/agents.yaml`` may add kinds or replace built-ins (schema:
``schemas/agents.schema.json``). A caller names a kind; it never supplies a command.

An agent's environment is built from an allow-list, never inherited whole: :data:`BASE_ENV` for
every kind plus the kind's own ``env_allow`` (built-ins: ``ANTHROPIC_API_KEY`` … for ``claude``,
``OPENAI_API_KEY`` and ``CODEX_HOME`` … for ``codex``, ``PYTHONPATH`` for ``script``). An entry is a
variable name or a prefix ending in ``*``. Nothing that could match a ``CORRAL_*`` variable is ever
allowed (refused at load, ``config_invalid``, and filtered again when the environment is built), so
an agent never learns where its coordinator's credentials, store or state home are.

An absent file means the built-ins; a path that is there but is not a readable regular file (a
directory, a FIFO, a dangling symlink) is refused (``agents_config_invalid``), because ignoring it
would silently run the built-in kinds instead of the configured ones.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.agents.abc import AgentKindError, StartOptions
from runner.cache import ContentCache, key_for
from runner.data import data_dir
from runner.errors import InputError, InvalidError, SpecError

if TYPE_CHECKING:
    from runner.agents.drivers import RunSpec  # the drivers load only to run a prompt (cold start)

# Every kind's agents get these (if set): what a command needs to run and print, nothing of corral's.
BASE_ENV: tuple[str, ...] = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_*", "TERM", "TMPDIR", "SHELL", "TZ")
FORBIDDEN_PREFIX = "CORRAL_"


def env_entry_forbidden(entry: str) -> bool:
    """Whether an allow-list entry could let a ``CORRAL_*`` variable through (``CORRAL_X``, ``COR*``, ``*``)."""
    upper = entry.upper()
    if upper.endswith("*"):
        stem = upper[:-1]
        return FORBIDDEN_PREFIX.startswith(stem) or stem.startswith(FORBIDDEN_PREFIX)
    return upper.startswith(FORBIDDEN_PREFIX)


def _allowed(name: str, allow: tuple[str, ...]) -> bool:
    if name.upper().startswith(FORBIDDEN_PREFIX):
        return False
    return any(name.startswith(e[:-1]) if e.endswith("*") else name == e for e in allow)


@dataclass(frozen=True)
class Kind:
    """How to run one prompt for agents of this kind."""

    name: str
    argv: tuple[str, ...]
    prompt: str = "stdin"  # or "argv": the prompt as one last argument
    options: Mapping[str, str] = field(default_factory=dict)
    blocked_exit_codes: tuple[int, ...] = ()
    blocked_marker: str | None = None
    herdr_kind: str | None = None
    source: str = "built-in"
    env_allow: tuple[str, ...] = ()  # beyond BASE_ENV; never CORRAL_*
    driver: str = "plain"
    """How the CLI is run and read (:mod:`runner.agents.drivers`): ``claude``, ``codex``, ``script``, ``plain``."""
    unconfined: bool = False
    """An explicit wider grant (``agents.yaml``): the CLI's own permission checks are bypassed."""
    network: bool = True
    """Whether its runs reach the network inside the process host's confinement (``agents.yaml``
    ``network: false`` cuts it: a new network namespace with loopback only)."""

    def environment(self, source: Mapping[str, str]) -> dict[str, str]:
        """The environment an agent of this kind runs with: ``source`` filtered by the allow-list."""
        allow = BASE_ENV + self.env_allow
        return {name: value for name, value in source.items() if _allowed(name, allow)}

    def run_argv(self, spec: RunSpec) -> list[str]:
        """The argv of one prompt's run through this kind's driver (the prompt itself never in it)."""
        from runner.agents.drivers import driver

        base = [sys.executable if part == "{python}" else part for part in self.argv]
        chosen = driver(self.driver)
        if not chosen.structured:
            return chosen.argv(self.command(StartOptions(model=spec.model, effort=spec.effort)), spec)
        return chosen.argv(base, spec)

    def command(self, options: StartOptions) -> list[str]:
        """The argv for one prompt (``{python}`` expanded; options as flag/value pairs). The supervisor
        adds the prompt itself as the last argument when ``prompt`` is ``argv``."""
        argv = [sys.executable if part == "{python}" else part for part in self.argv]
        for option, flag in sorted(self.options.items()):
            value = getattr(options, option, None)
            if value is not None:
                argv += [flag, value]
        return argv

    def check_options(self, options: StartOptions) -> None:
        """Refuse an option this kind does not take (only ``claude`` takes model and effort)."""
        for option in ("model", "effort"):
            if getattr(options, option) is not None and option not in self.options:
                raise InputError(option, f"agent kind {self.name!r} does not take --{option}", code="input_invalid")


BUILTIN: dict[str, Kind] = {
    "claude": Kind(
        "claude",
        ("claude", "-p"),
        options={"model": "--model", "effort": "--effort"},
        env_allow=(
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            "CLAUDE_CONFIG_DIR",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "DISABLE_AUTOUPDATER",
        ),
        driver="claude",
    ),
    "codex": Kind(
        "codex",
        ("codex", "exec"),
        options={"model": "--model"},
        env_allow=("CODEX_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME"),
        driver="codex",
    ),
    "script": Kind(
        "script",
        ("{python}", "-m", "runner.agents.demo_agent"),
        blocked_exit_codes=(3,),
        blocked_marker="CORRAL-BLOCKED",
        herdr_kind="script",
        env_allow=("PYTHONPATH",),  # the demo agent is corral's own module: it must import the same runner
        driver="script",
    ),
}


class Kinds:
    """The kinds in force: built-ins overlaid by the home's and then the project's agents.yaml."""

    def __init__(self, kinds: Mapping[str, Kind]) -> None:
        self._kinds = dict(kinds)

    @classmethod
    def load(cls, files: list[Path], cache_dir: Path | None = None) -> Kinds:
        """Built-ins, then each existing file in order (later files win)."""
        kinds = dict(BUILTIN)
        cache = ContentCache(cache_dir)
        for path in files:
            raw = _read_config(path)
            if raw is not None:
                kinds.update(_load_file(path, raw, cache))
        return cls(kinds)

    def get(self, name: str) -> Kind:
        kind = self._kinds.get(name)
        if kind is None:
            raise AgentKindError(
                f"unknown agent kind {name!r} (configured: {', '.join(sorted(self._kinds))})", kind=name
            )
        return kind

    def names(self) -> list[str]:
        return sorted(self._kinds)

    def __iter__(self) -> Any:
        return iter(self._kinds[n] for n in self.names())


def config_files(home_root: Path, project: Path | None = None) -> list[Path]:
    """Where agents.yaml may live, in the order they apply."""
    return [home_root / "agents.yaml", (project or Path.cwd()) / ".corral" / "agents.yaml"]


def _invalid(path: Path, why: str) -> InvalidError:
    return InvalidError(
        f"the agents configuration {path} {why}; make it a regular YAML file or remove it "
        "(without it the built-in kinds apply)",
        code="agents_config_invalid",
        path=str(path),
    )


def _read_config(path: Path) -> bytes | None:
    """The bytes of one agents.yaml, or None if nothing is at ``path`` (a symlink to one is followed).

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` before reading, so a FIFO cannot hang us.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):
            raise _invalid(path, f"is a dangling symlink (to {os.readlink(path)})") from None
        return None  # absent: the built-ins
    except IsADirectoryError:
        raise _invalid(path, "is a directory") from None
    except OSError as exc:
        raise _invalid(path, f"cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _invalid(path, "is not a regular file (a directory, FIFO, socket or device)")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    except OSError as exc:
        raise _invalid(path, f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def _load_file(path: Path, raw: bytes, cache: ContentCache) -> dict[str, Kind]:
    schema = (data_dir("schemas") / "agents.schema.json").read_bytes()
    key = key_for(schema, raw)
    doc = cache.get(key)  # verified against its recorded body digest and key
    if doc is not None:
        try:
            return _kinds_of(path, doc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            cache.reject(key, f"not a validated agents.yaml ({type(exc).__name__})")
    doc = _validate(path, raw)
    cache.put(key, doc)
    return _kinds_of(path, doc)


def _kinds_of(path: Path, doc: Any) -> dict[str, Kind]:
    for name, spec in doc["kinds"].items():
        for entry in spec.get("env_allow") or ():
            if env_entry_forbidden(entry):
                raise InputError(
                    "agents.yaml",
                    f"{path}: kind {name!r} allows {entry!r} in env_allow, which could pass corral's own "
                    "CORRAL_* variables (state home, store, credentials) to agents; remove it",
                    code="config_invalid",
                    path=str(path),
                    kind=name,
                )
    return {
        name: Kind(
            name=name,
            argv=tuple(spec["argv"]),
            prompt=spec.get("prompt", "stdin"),
            options=dict(spec.get("options") or {}),
            blocked_exit_codes=tuple(spec.get("blocked_exit_codes") or ()),
            blocked_marker=spec.get("blocked_marker"),
            herdr_kind=spec.get("herdr_kind"),
            source=str(path),
            env_allow=_env_allow(name, spec),
            driver=str(spec.get("driver") or (BUILTIN[name].driver if name in BUILTIN else "plain")),
            unconfined=bool(spec.get("unconfined", False)),
            network=bool(spec.get("network", True)),
        )
        for name, spec in doc["kinds"].items()
    }


def _env_allow(name: str, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """A file's kind extends the built-in kind it replaces: its own entries plus the built-in's."""
    builtin = BUILTIN.get(name)
    own = tuple(spec.get("env_allow") or ())
    return (builtin.env_allow if builtin is not None else ()) + own


def _validate(path: Path, raw: bytes) -> Any:
    from runner.documents import schema, yamlsource

    source = yamlsource.parse(yamlsource.decode(raw, str(path)), str(path))
    diagnostics = schema.check(source, "agents")
    if diagnostics:
        raise SpecError(diagnostics)
    return source.data

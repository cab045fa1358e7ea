"""The ``corral`` command line: the root group, the options and helpers its commands share, and the
entry point; each command lives in the module :data:`COMMAND_MODULES` names, loaded when it runs.
Commands parse, call the service, render: no business rules live here.

Every command takes ``--json``. Errors are ``{"error": {"code", "message", "details"}}`` on stdout
with ``--json``, one ``error [code]: message`` line on stderr without. Exit statuses come from the
table in :mod:`runner.errors`: 0 ok, 1 unexpected, 2 usage, 3 invalid, 4 refused, 5 conflict.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from runner._version import __version__
from runner.cli import render
from runner.errors import CorralError, CredentialError, InputError, RefusedError, UsageError
from runner.runtime import Config, Runtime

if TYPE_CHECKING:
    from runner.fence import Credential

F = TypeVar("F", bound=Callable[..., Any])


# Every command gets corral from the runtime (runner.runtime): the CLI is one surface among others
# and assembles nothing itself. ``App`` is the name the commands' ``@click.pass_obj`` annotations use.
App = Runtime


def json_option(fn: F) -> F:
    """Add ``--json`` (machine-readable output) to a command."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for programs instead of text.")(fn)


def http_server_options(default_port: int, *, when: str = "", token_for: str) -> Callable[[F], F]:
    """``--listen``, ``--auth-token-file``, ``--allow-host`` and ``--max-request-size``: what every HTTP server
    of corral takes (``corral serve``; ``corral mcp --http``, whose help says ``when``: "With --http: ")."""

    def said(text: str) -> str:
        return when + text if when else text[0].upper() + text[1:]

    def add(fn: F) -> F:
        for option in reversed(
            (
                click.option(
                    "--listen",
                    metavar="ADDR",
                    default=f"127.0.0.1:{default_port}",
                    show_default=True,
                    help=said(
                        "HOST:PORT, or unix:///path for a unix socket (created 0600). Off loopback a token is required."
                    ),
                ),
                click.option(
                    "--auth-token-file",
                    type=click.Path(dir_okay=False, path_type=Path),
                    help=said(f"a private file (chmod 600) holding the bearer token {token_for}."),
                ),
                click.option(
                    "--allow-host",
                    "allow_hosts",
                    metavar="NAME",
                    multiple=True,
                    help=said(
                        "also answer requests whose Host (or Origin) names NAME (repeatable); any other name than "
                        "the listen address and localhost is refused 421 (DNS rebinding)."
                    ),
                ),
                click.option(
                    "--max-request-size",
                    type=int,
                    default=1 << 20,
                    show_default=True,
                    help=said(
                        "the largest request body in bytes; larger ones are answered 413 before they are read whole."
                    ),
                ),
            )
        ):
            fn = option(fn)
        return fn

    return add


class RenamedOption(click.Option):
    """An option that still parses its old names (deprecated, for one release) but shows only its new
    ones in ``--help``: ``--ttl-seconds`` takes ``--ttl`` as well (docs/cli.md, "Deprecated names")."""

    def __init__(self, *args: Any, old: tuple[str, ...] = (), **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.old = old

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown = self.opts
        self.opts = [opt for opt in shown if opt not in self.old]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def ttl_option(default: int | None, help: str) -> Callable[[F], F]:
    """``--ttl-seconds`` (its old name ``--ttl`` still taken, not shown): a lease's time to live."""
    return click.option(
        "--ttl-seconds",
        "--ttl",
        "ttl_seconds",
        cls=RenamedOption,
        old=("--ttl",),
        type=int,
        default=default,
        show_default=default is not None,
        help=help,
    )


def controller_option(fn: F) -> F:
    return click.option(
        "--controller",
        "controller_id",
        required=True,
        envvar="CORRAL_CONTROLLER",
        show_envvar=True,
        help="The controller id (1-100 of [A-Za-z0-9_.-]).",
    )(fn)


def credential_option(fn: F) -> F:
    return click.option(
        "--credential",
        "credential_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="The credential file (default: $CORRAL_HOME/credentials/<controller>.json).",
    )(fn)


def _credential_path(app: App, controller_id: str, explicit: Path | None) -> Path:
    return app.credentials.path(controller_id, explicit)  # checked private first


def bind_option(fn: F) -> F:
    return click.option(
        "--bind-process",
        "bind_process",
        is_flag=True,
        help="Bind the credential to the calling process (the shell or agent running corral): later "
        "commands are refused unless they run from it or its descendants.",
    )(fn)


def load_credential(app: App, controller_id: str, explicit: Path | None) -> Credential:
    """The controller's credential from ``--credential`` or the state home, checked against the store.

    The one loading path of every command that acts with a credential (see
    :class:`runner.runtime.CredentialFiles`): it refuses an unsafe or malformed file, a caller outside a
    ``--bind-process`` binding (``caller_not_controller``), and settles a grant left pending by a crash.
    """
    return app.credentials.load(controller_id, explicit)


def fenced(app: App, command: str, controller_id: str, credential_path: Path | None, *fields: Any, **named: Any) -> Any:
    """Do ``command``'s fenced operation (from the operation table): its Input built from the
    controller's credential (:func:`load_credential`) and ``fields`` (in order, then ``named``), then
    its method."""
    from runner.service.operations import by_command

    op = by_command(command)
    cls, method = op.input_type, op.method
    assert cls is not None and method is not None, command
    inp = cls(controller_id, load_credential(app, controller_id, credential_path), *fields, **named)
    target: Any = app.service
    for part in method.split("."):
        target = getattr(target, part)
    return target(inp)


def absolute_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--cwd``/``--worktree`` given relative is taken against the current directory, as users expect
    (the output shows the absolute path the service resolved)."""
    import os

    return os.path.abspath(value) if value else value


def blocked_options(fn: Any) -> Any:
    """``--blocked`` and ``--reason``: an operator's decision to end the lease of a blocked agent."""
    fn = click.option("--reason", help="Why (with --blocked): recorded with the lease as the operator's decision.")(fn)
    return click.option(
        "--blocked", is_flag=True, help="The agent is blocked (waits on a person): end the lease anyway."
    )(fn)


def blocked_reason(blocked: bool, reason: str | None) -> str | None:
    """The reason recorded for ``--blocked`` (required with it, refused without it)."""
    if blocked and not (reason and reason.strip()):
        raise UsageError("--blocked needs --reason TEXT: the decision is recorded", code="usage")
    if reason is not None and not blocked:
        raise UsageError("--reason goes with --blocked", code="usage")
    return reason if blocked else None


def _already_released(app: App, controller_id: str, exc: CredentialError) -> None:
    """A second release finds no credential: say the lease is released, not "acquire first"."""
    if exc.code != "credential_missing":
        return
    lease = app.service.controller.controller_lease(controller_id)
    if lease is not None and lease.state == "released":
        raise RefusedError(
            f"the lease of controller {controller_id!r} was already released at {lease.data.get('released_at')} "
            f"(checkpoint {lease.data.get('checkpoint_ref')!r}); nothing to release",
            code="lease_released",
            controller_id=controller_id,
            released_at=lease.data.get("released_at"),
        ) from None


def _binding(bind_process: bool) -> Any:
    from runner.lineage import Binding

    return Binding.of_caller() if bind_process else None


def _grant(app: App, controller_id: str, path: Path, fire: Callable[[Any], Any], binding: Any, keep: bool) -> Any:
    """Grant with the proposed credential saved first (see ``runner.credentials.grant``)."""
    return app.credentials.grant(controller_id, path, fire, binding=binding, keep_binding=keep)


# The command modules and the top-level commands each registers. A command's module is imported only
# when that command runs (or help lists them all), so `controller renew` does not pay for the agent,
# writer and plan commands (tests/cli/test_cli.py checks this table against what the modules register).
def checkpoint_options(fn: F) -> F:
    """``--checkpoint memory:<id>`` or ``--checkpoint-ref R --checkpoint-sha256 H``."""
    fn = click.option(
        "--checkpoint-sha256",
        help="SHA-256 of the checkpoint (64 hex digits); with --checkpoint memory:<id>, the digest it must have.",
    )(fn)
    fn = click.option("--checkpoint-ref", help="Where the work stands (a commit, a document).")(fn)
    return click.option(
        "--checkpoint",
        "memory_checkpoint",
        metavar="memory:ID",
        help="A handoff checkpoint (corral memory checkpoint): its ref and digest are filled from its content.",
    )(fn)


def checkpoint_choice(memory_checkpoint: str | None, ref: str | None, sha256: str | None) -> tuple[str, str | None]:
    """The release's checkpoint ref and digest from exactly one of ``--checkpoint`` and ``--checkpoint-ref``."""
    if (memory_checkpoint is None) == (ref is None):
        raise UsageError("give exactly one of --checkpoint memory:ID and --checkpoint-ref", code="usage")
    if memory_checkpoint is not None:
        if not memory_checkpoint.startswith("memory:"):
            raise UsageError("--checkpoint takes memory:<checkpoint id> (corral memory checkpoint)", code="usage")
        return memory_checkpoint, sha256.lower() if sha256 else None
    if sha256 is None and not str(ref).startswith("memory:"):
        raise UsageError("--checkpoint-ref needs --checkpoint-sha256", code="usage")
    return str(ref), sha256.lower() if sha256 else None


def page_options(fn: F) -> F:
    """``--limit N`` and ``--after KEY`` for a listing: one page, and where the next one starts."""
    fn = click.option(
        "--after",
        metavar="KEY",
        help="Start after this key: the previous page's next_after (printed on stderr in text).",
    )(fn)
    return click.option("--limit", type=int, metavar="N", help="At most N rows (1-10000); see --after.")(fn)


COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(("check", "draw", "machines", "review-pack", "validate"), "runner.cli.definitions"),
    "controller": "runner.cli.controller",
    "events": "runner.cli.events",
    **dict.fromkeys(("agent", "agents", "reviewer", "status"), "runner.cli.agents"),
    **dict.fromkeys(("abandon", "ask", "ask-many", "collect", "receipts", "relay", "wait-any"), "runner.cli.receipts"),
    **dict.fromkeys(("adopt", "adopted"), "runner.cli.adopted"),
    **dict.fromkeys(("plans", "recipe", "run"), "runner.cli.plans"),
    **dict.fromkeys(("preflight", "scopes", "writer"), "runner.cli.writers"),
    "paths": "runner.cli.paths",
    "init": "runner.cli.quickstart",
    "memory": "runner.cli.memory",
    "mcp": "runner.cli.mcp",
    "serve": "runner.cli.serve",
    "mesh": "runner.cli.mesh",
    "store": "runner.cli.stores",
}


class LazyGroup(click.Group):
    """The ``corral`` group: commands of other modules load on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            import importlib

            importlib.import_module(COMMAND_MODULES[cmd_name])
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--store",
    "store_url",
    envvar="CORRAL_STORE",
    show_envvar=True,
    metavar="URL",
    help="Store URL (default: sqlite:///$CORRAL_HOME/corral.db).",
)
@click.option(
    "--store-file",
    "store_file",
    envvar="CORRAL_STORE_FILE",
    show_envvar=True,
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the store URL from FILE (mode 0600: a password stays out of argv and ps).",
)
@click.option(
    "--home",
    "home_dir",
    envvar="CORRAL_HOME",
    show_envvar=True,
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="State home (default: $XDG_STATE_HOME/corral or ~/.local/state/corral).",
)
@click.option("-v", "--verbose", count=True, help="Log to stderr (-v info, -vv debug).")
@click.version_option(__version__, prog_name="corral")
@click.pass_context
def cli(
    ctx: click.Context, store_url: str | None, store_file: Path | None, home_dir: Path | None, verbose: int
) -> None:
    """corral: drive coding agents through guarded, durable state machines."""
    if store_file is not None:
        # The command line over the environment; both flags at once is a usage error.
        given = click.core.ParameterSource.COMMANDLINE
        url_given = ctx.get_parameter_source("store_url") is given
        if url_given and ctx.get_parameter_source("store_file") is given:
            raise UsageError("give --store or --store-file, not both", code="usage")
        if not url_given:
            store_url = read_store_file(store_file)
    if verbose:
        import logging  # only with -v: a cold command that logs nothing does not pay for logging

        logging.basicConfig(
            level=logging.DEBUG if verbose > 1 else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
    app = Runtime.open(Config.load(store=store_url, home=home_dir, surface="cli"))
    ctx.obj = app
    ctx.call_on_close(app.close)


# --- entry point ----------------------------------------------------------------------------------


def read_store_file(path: Path) -> str:
    """The store URL in ``path``: its first non-blank line, from a file only its owner can read.

    Raises:
        InputError: ``store_url_invalid`` when the file cannot be read, is readable or writable by
            group or others (it may hold a password), or holds no URL.
    """
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(
            "store_file", f"cannot read the store file {path}: {exc.strerror}", code="store_url_invalid"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise InputError(
                "store_file",
                f"the store file {path} must be a regular file only its owner can read (chmod 600 {path})",
                code="store_url_invalid",
                mode=oct(stat.S_IMODE(info.st_mode)),
            )
        text = os.read(fd, 65536).decode("utf-8", "replace")
    finally:
        os.close(fd)
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    raise InputError("store_file", f"the store file {path} holds no store URL", code="store_url_invalid")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used by tests in-process)."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    try:
        cli.main(args=args, prog_name="corral", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.Abort:
        sys.stderr.write("aborted\n")
        return 130
    except click.ClickException as exc:
        usage = UsageError(exc.format_message(), code="usage")
        if as_json:
            render.emit_error(usage, True)
        else:
            exc.show()
        return usage.status.exit
    except CorralError as exc:
        render.emit_error(exc, as_json)
        return exc.status.exit
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if os.environ.get("CORRAL_DEBUG"):
            raise
        error = CorralError(f"unexpected {type(exc).__name__}: {exc} (set CORRAL_DEBUG=1 for a traceback)")
        render.emit_error(error, as_json)
        return 1
    return 0


def run() -> None:
    """Console-script entry point."""
    raise SystemExit(main())

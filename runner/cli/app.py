"""The ``corral`` command line: parse, call the service, render. No business rules live here.

Every command takes ``--json``. Errors are ``{"error": {"code", "message", "details"}}`` on stdout
with ``--json``, one ``error [code]: message`` line on stderr without. Exit statuses come from the
table in :mod:`runner.errors`: 0 ok, 1 unexpected, 2 usage, 3 invalid, 4 refused, 5 conflict.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
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
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(("agent", "agents", "reviewer", "status"), "runner.cli.agents"),
    **dict.fromkeys(("abandon", "ask", "ask-many", "collect", "receipts", "relay", "wait-any"), "runner.cli.receipts"),
    **dict.fromkeys(("adopt", "adopted"), "runner.cli.adopted"),
    **dict.fromkeys(("plans", "recipe", "run"), "runner.cli.plans"),
    **dict.fromkeys(("preflight", "scopes", "writer"), "runner.cli.writers"),
    "paths": "runner.cli.paths",
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


# --- definitions ----------------------------------------------------------------------------------


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@json_option
@click.pass_obj
def validate(app: App, paths: tuple[Path, ...], strict: bool, as_json: bool) -> None:
    """Validate machine definitions (default: the built-in and local ones).

    Prints OK or FAIL per file and every diagnostic as file:line:column: severity code pointer: message.
    Every file gets its own verdict; the exit status is the worst: 1 if corral itself failed on a
    file (``internal``, a bug), else 3 if any file failed, else 0.
    """
    from runner.service import ValidateInput
    from runner.service import validate as run

    reports = run(app.library, ValidateInput(tuple(paths)))
    failed = [r for r in reports if not r.ok or (strict and r.diagnostics)]
    if as_json:
        render.emit_json(
            {
                "ok": not failed,
                "files": [
                    {
                        "path": r.path,
                        "kind": r.kind,
                        "name": r.name,
                        "ok": r not in failed,
                        "diagnostics": [d.to_dict() for d in r.diagnostics],
                    }
                    for r in reports
                ],
            }
        )
    else:
        for report in reports:
            click.echo(f"{'FAIL' if report in failed else 'OK  '} {report.path}")
            for diagnostic in report.diagnostics:
                click.echo(f"  {diagnostic.render()}")
        errors = sum(d.severity == "error" for r in reports for d in r.diagnostics)
        warnings = sum(d.severity == "warning" for r in reports for d in r.diagnostics)
        click.echo(f"{len(reports)} file(s): {len(failed)} failed, {errors} error(s), {warnings} warning(s)")
    if any(d.code == "internal" for r in reports for d in r.diagnostics):
        raise SystemExit(1)
    if failed:
        raise SystemExit(3)


@cli.command()
@json_option
@click.pass_obj
def machines(app: App, as_json: bool) -> None:
    """List the machines corral knows: built-in, then local (./machines, $CORRAL_MACHINES)."""
    from runner.service import machines as run

    found = run(app.library)
    if as_json:
        render.emit_json({"machines": [m.to_dict() for m in found]})
        return
    render.table(
        None,
        ["machine", "version", "states", "transitions", "source", "description"],
        [
            (
                m.name,
                m.version,
                m.states,
                m.transitions,
                "built-in" if m.builtin else m.path,
                f"INVALID: {m.error} (run corral validate)" if m.error else m.description.split(". ")[0],
            )
            for m in found
        ],
    )


@cli.command()
@click.argument("machine", required=False)
@click.option("--instance", "instance_id", metavar="ID", help="Highlight this instance's state and the path it took.")
@click.option("--recipe", "recipe_name", metavar="NAME", help="Draw a recipe's steps instead of a machine.")
@click.option("--plan", "plan_id", metavar="ID", help="Draw a plan's recipe, each step coloured by its state.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "dot", "svg", "png"]),
    default="mermaid",
    show_default=True,
    help="mermaid and dot need nothing installed; svg and png need Graphviz.",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE instead of stdout.")
@json_option
@click.pass_obj
def draw(
    app: App,
    machine: str | None,
    instance_id: str | None,
    recipe_name: str | None,
    plan_id: str | None,
    fmt: str,
    out: Path | None,
    as_json: bool,
) -> None:
    """Draw MACHINE (with --instance ID, the path that instance took), a --recipe, or a --plan.

    Give exactly one of MACHINE, --recipe NAME and --plan ID. A machine shows every transition's
    guards, updates and effects; a recipe its steps in order, each with the operation it does and the
    machine that operation drives; a plan its recipe with each step coloured by its recorded state.
    """
    chosen = [name for name, given in (("MACHINE", machine), ("--recipe", recipe_name), ("--plan", plan_id)) if given]
    if len(chosen) != 1:
        raise UsageError(
            f"give exactly one of MACHINE, --recipe NAME, --plan ID (got {', '.join(chosen) or 'none'})",
            code="usage",
        )
    if instance_id is not None and machine is None:
        raise UsageError("--instance ID goes with MACHINE: corral draw MACHINE --instance ID", code="usage")
    if fmt == "png" and out is None:
        raise InputError("out", "png is binary: give --out FILE")
    if out is not None and not out.parent.is_dir():
        raise InputError("out", f"the directory {out.parent} does not exist: create it first, or write elsewhere")
    from runner.service.definitions import draw as drawn

    doc, picture, what = drawn(
        app.service,
        app.library,
        machine=machine,
        instance_id=instance_id,
        recipe_name=recipe_name,
        plan_id=plan_id,
        fmt=fmt,
    )
    if out is not None:
        try:
            out.write_bytes(picture if isinstance(picture, bytes) else picture.encode("utf-8"))
        except OSError as exc:
            raise InputError("out", f"cannot write {out}: {exc.strerror}") from None
        if as_json:
            render.emit_json({**doc, "out": str(out)})
        else:
            click.echo(f"wrote {out} ({fmt}, {what})", err=True)
        return
    assert isinstance(picture, str)
    if as_json:
        render.emit_json({**doc, "drawing": picture})
    else:
        click.echo(picture, nl=False)


@cli.command(name="review-pack")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("review-pack"),
    show_default=True,
    help="The directory to write index.html into (created if missing).",
)
@json_option
@click.pass_obj
def review_pack(app: App, out: Path, as_json: bool) -> None:
    """Write one self-contained HTML page for reviewers: every machine and recipe, drawn and tabulated.

    No network resources at all (the drawings are inline SVG from Graphviz, which must be installed):
    open DIR/index.html anywhere, attach it to a review, archive it with a release.
    """
    written = app.write_review_pack(out)
    if as_json:
        render.emit_result("review-pack", written)
    else:
        click.echo(str(written.path))


# --- controller lease -----------------------------------------------------------------------------


@cli.group()
def controller() -> None:
    """The controller lease: exclusive authority under a controller id, proven by a fence."""


def _show_lease(app: App, verb: str, lease: Any, credential_path: Path | None, as_json: bool) -> None:
    doc = {"lease": lease.to_dict()}
    if credential_path is not None:
        doc["credential_path"] = str(credential_path)
    if as_json:
        render.emit_json(doc)
        return
    data = lease.data
    now = app.service.now()
    click.echo(
        f"{verb} controller {lease.controller_id}: {lease.state}, lease {data.get('lease_id')}, "
        f"generation {data.get('generation')}"
    )
    if lease.state == "active":
        click.echo(f"  expires {data.get('expires_at')} ({render.relative_time(data.get('expires_at'), now)})")
    if credential_path is not None:
        click.echo(f"  credential: {credential_path} (0600; the token is never printed)")


@controller.command()
@controller_option
@click.option("--authority-ref", required=True, help="What authorises this controller (ticket, plan, URL).")
@click.option("--authority-sha256", required=True, help="SHA-256 of the authority document (64 hex digits).")
@click.option("--ttl", "ttl_seconds", type=int, default=900, show_default=True, help="Lease time to live, 5-86400 s.")
@click.option("--holder", help="Who holds it, for listings (default: user@host).")
@credential_option
@bind_option
@json_option
@click.pass_obj
def acquire(
    app: App,
    controller_id: str,
    authority_ref: str,
    authority_sha256: str,
    ttl_seconds: int,
    holder: str | None,
    credential_path: Path | None,
    bind_process: bool,
    as_json: bool,
) -> None:
    """Take the lease of a controller id nobody holds; writes the credential file."""
    from dataclasses import replace

    from runner.service import AcquireInput

    inp = AcquireInput(controller_id, authority_ref, authority_sha256.lower(), ttl_seconds, holder)
    path = _credential_path(app, controller_id, credential_path)
    binding = _binding(bind_process)
    grant = _grant(
        app, controller_id, path, lambda p: app.service.controller.acquire(replace(inp, proposal=p)), binding, False
    )
    _show_lease(app, "acquired", grant.lease, path, as_json)


@controller.command()
@controller_option
@click.option("--ttl", "ttl_seconds", type=int, help="New time to live, 5-86400 s (default: the lease's own).")
@credential_option
@json_option
@click.pass_obj
def renew(app: App, controller_id: str, ttl_seconds: int | None, credential_path: Path | None, as_json: bool) -> None:
    """Extend the lease; the fence is unchanged."""

    lease = fenced(app, "controller renew", controller_id, credential_path, ttl_seconds)
    _show_lease(app, "renewed", lease, None, as_json)


@controller.command()
@controller_option
@click.option("--ttl", "ttl_seconds", type=int, help="New time to live, 5-86400 s (default: the lease's own).")
@click.option("--holder", help="Who holds it, for listings.")
@credential_option
@bind_option
@json_option
@click.pass_obj
def resume(
    app: App,
    controller_id: str,
    ttl_seconds: int | None,
    holder: str | None,
    credential_path: Path | None,
    bind_process: bool,
    as_json: bool,
) -> None:
    """Continue your own lease (even expired): new token, next generation; the old token dies.

    A bound credential stays bound to the same process unless --bind-process binds it to this caller.
    """
    from runner.service import ResumeInput

    path = _credential_path(app, controller_id, credential_path)
    credential = load_credential(app, controller_id, path)
    binding = _binding(bind_process)
    grant = _grant(
        app,
        controller_id,
        path,
        lambda p: app.service.controller.resume(
            ResumeInput(controller_id, credential, ttl_seconds, holder, proposal=p)
        ),
        binding,
        True,
    )
    _show_lease(app, "resumed", grant.lease, path, as_json)


@controller.command()
@controller_option
@click.option(
    "--expect-lease",
    "expected_lease_id",
    required=True,
    help="The lease id you saw expire (from `corral controller list`).",
)
@click.option("--ttl", "ttl_seconds", type=int, default=900, show_default=True, help="Time to live, 5-86400 s.")
@click.option("--holder", help="Who holds it, for listings (default: user@host).")
@click.option("--authority-ref", help="A new authority reference (default: keep the predecessor's).")
@click.option("--authority-sha256", help="SHA-256 of the new authority document.")
@credential_option
@bind_option
@json_option
@click.pass_obj
def takeover(
    app: App,
    controller_id: str,
    expected_lease_id: str,
    ttl_seconds: int,
    holder: str | None,
    authority_ref: str | None,
    authority_sha256: str | None,
    credential_path: Path | None,
    bind_process: bool,
    as_json: bool,
) -> None:
    """Claim an expired lease held by someone else; writes the credential file."""
    from dataclasses import replace

    from runner.service import TakeoverInput

    inp = TakeoverInput(
        controller_id,
        expected_lease_id,
        ttl_seconds,
        holder,
        authority_ref,
        authority_sha256.lower() if authority_sha256 else None,
    )
    path = _credential_path(app, controller_id, credential_path)
    binding = _binding(bind_process)
    grant = _grant(
        app, controller_id, path, lambda p: app.service.controller.takeover(replace(inp, proposal=p)), binding, False
    )
    _show_lease(app, "took over", grant.lease, path, as_json)


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


@controller.command()
@controller_option
@checkpoint_options
@credential_option
@json_option
@click.pass_obj
def release(
    app: App,
    controller_id: str,
    memory_checkpoint: str | None,
    checkpoint_ref: str | None,
    checkpoint_sha256: str | None,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Give the lease up with a checkpoint; deletes the now useless credential file.

    A handoff checkpoint (--checkpoint memory:ID) must be of the project named as the controller id.
    """
    from runner.service import ReleaseInput

    ref, digest = checkpoint_choice(memory_checkpoint, checkpoint_ref, checkpoint_sha256)
    path = _credential_path(app, controller_id, credential_path)
    try:
        credential = load_credential(app, controller_id, path)
    except CredentialError as exc:
        _already_released(app, controller_id, exc)
        raise
    lease = app.service.controller.release(ReleaseInput(controller_id, credential, ref, digest))
    from runner import faults

    faults.point("release_before_discard")
    # Only if it still holds the released grant: an acquire may have written its successor meanwhile.
    app.credentials.discard(path, controller_id, credential)
    _show_lease(app, "released", lease, None, as_json)


def page_options(fn: F) -> F:
    """``--limit N`` and ``--after KEY`` for a listing: one page, and where the next one starts."""
    fn = click.option(
        "--after",
        metavar="KEY",
        help="Start after this key: the previous page's next_after (printed on stderr in text).",
    )(fn)
    return click.option("--limit", type=int, metavar="N", help="At most N rows (1-10000); see --after.")(fn)


@controller.command(name="list")
@click.option("--controller", "controller_id", help="Only this controller id (in any state).")
@click.option("--all", "include_ended", is_flag=True, help="Include released leases (default: held ones only).")
@page_options
@json_option
@click.pass_obj
def list_leases(
    app: App, controller_id: str | None, include_ended: bool, limit: int | None, after: str | None, as_json: bool
) -> None:
    """Held leases (with --all, released ones too) with their expiry judged by the store's clock;
    tokens are never shown. Pages in controller id order with --limit and --after."""
    from runner.service import ListLeasesInput

    leases = app.service.controller.leases(ListLeasesInput(controller_id, include_ended, after, limit))
    now = app.service.now()
    render.listing(
        "controller list",
        leases,
        as_json,
        ["controller", "state", "generation", "lease", "holder", "expires"],
        lambda lease: (
            lease.controller_id,
            lease.state + (" (expired)" if lease.expired else ""),
            lease.data.get("generation"),
            lease.data.get("lease_id"),
            lease.data.get("holder"),
            render.relative_time(lease.data.get("expires_at"), now) if lease.state == "active" else "-",
        ),
    )


# --- events ---------------------------------------------------------------------------------------


@cli.group(invoke_without_command=True)
@click.option(
    "--since",
    type=int,
    help="Only events after this sequence number (default: every event still kept, from the retention floor).",
)
@click.option("--limit", type=int, help="At most this many events (not with --follow).")
@click.option("--instance", "instance_id", help="Only events of this instance (e.g. controller/NAME).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they are appended.")
@click.option(
    "--from-floor",
    is_flag=True,
    help="Start at the retention floor if --since is below it (the pruned events are gone), instead of "
    "failing with events_pruned.",
)
@json_option
@click.pass_context
def events(
    ctx: click.Context,
    since: int | None,
    limit: int | None,
    instance_id: str | None,
    follow: bool,
    from_floor: bool,
    as_json: bool,
) -> None:
    """Print the event log (JSON lines with --json), oldest first, as it is read.

    Without --since it prints every event still kept (a note on stderr says where the retention floor
    is, once events were pruned). A --since below the floor (see `corral events prune`) fails with
    events_pruned (exit 5) naming the floor, never skipping events silently; --from-floor starts at the
    floor on purpose.
    """
    if ctx.invoked_subcommand is not None:
        flags = {"--since": since is not None, "--limit": limit, "--instance": instance_id, "--follow": follow}
        given = [flag for flag, value in {**flags, "--from-floor": from_floor}.items() if value]
        if given:
            raise UsageError(
                f"the options of `corral events` ({', '.join(given)}) do not go with "
                f"`corral events {ctx.invoked_subcommand}`",
                code="usage",
            )
        ctx.meta["events_json"] = as_json
        return
    from runner.service import EventsInput

    app: App = ctx.obj
    if since is None:  # everything still kept: not a request for what was pruned
        since, from_floor = 0, True
        floor = app.service.events.floor()
        if floor:
            click.echo(f"note: events up to {floor} were pruned (the retention floor); showing the rest", err=True)
    last = since
    backlog = app.service.events.stream(EventsInput(since, limit, instance_id), from_floor=from_floor)
    for event in _print_events(backlog, as_json):
        last = event.seq
    if not follow:
        return
    followed = app.service.events.follow(last, from_floor=from_floor)
    wanted = followed if instance_id is None else (e for e in followed if e.instance_id == instance_id)
    for _ in _print_events(wanted, as_json, flush_every=1):
        pass


# What render.emit_json writes for one event (json.dumps with these options), built once, not per event.
_encode_event = json.JSONEncoder(sort_keys=True, default=str).encode


def _print_events(found: Iterable[Any], as_json: bool, flush_every: int = 1000) -> Iterator[Any]:
    """Write each event as it is read (one JSON line, or one text line), yielding it after; flushed
    every ``flush_every`` events and at the end, so a reader of the pipe sees them promptly."""
    write = sys.stdout.write
    count = 0
    try:
        for event in found:
            if as_json:
                write(_encode_event(event.to_dict()) + "\n")
            else:
                changed = event.payload.get("changed") or {}
                shown = ", ".join(
                    f"{k}={v}" for k, v in changed.items() if k in ("generation", "lease_id", "expires_at")
                )
                write(
                    f"{event.seq:>6} {event.at} {event.instance_id} {event.trigger}: "
                    f"{event.from_state} -> {event.to_state} (v{event.version}) by {event.actor}"
                    + (f"  {shown}" if shown else "")
                    + "\n"
                )
            count += 1
            if count % flush_every == 0:
                sys.stdout.flush()
            yield event
    finally:
        sys.stdout.flush()


@events.command(name="prune")
@click.option("--keep", type=int, metavar="N", help="Keep the newest N events; the older ones go.")
@click.option("--before", type=int, metavar="SEQ", help="Delete the events with a sequence number below SEQ.")
@click.option(
    "--older-than", metavar="DURATION", help="Delete the events recorded longer ago than DURATION (30d, 12h, 1d12h)."
)
@click.option("--dry-run", is_flag=True, help="Only say what would be deleted.")
@json_option
@click.pass_context
def prune_events(
    ctx: click.Context, keep: int | None, before: int | None, older_than: str | None, dry_run: bool, as_json: bool
) -> None:
    """Delete the oldest events, by exactly one of --keep, --before, --older-than.

    Without any, applies the policy in $CORRAL_EVENTS_KEEP (a count to keep, or a duration); nothing
    prunes the log on its own. Only event rows go, never an instance. The store records the highest
    pruned sequence number as its retention floor (`corral status`); a reader asking for events
    below it is told so (events_pruned). Deletes in batches, each a short transaction.
    """
    from runner.service.events import PruneEventsInput

    app: App = ctx.obj
    as_json = as_json or bool(ctx.meta.get("events_json"))
    source = "options"
    if keep is None and before is None and older_than is None:
        policy = app.config.events_keep
        if policy is None:
            raise UsageError(
                "give one of --keep N, --before SEQ, --older-than DURATION (or set a policy in CORRAL_EVENTS_KEEP)",
                code="usage",
            )
        inp = PruneEventsInput.from_policy(policy, dry_run=dry_run)
        source = "CORRAL_EVENTS_KEEP"
    else:
        inp = PruneEventsInput(keep, before, older_than, dry_run)
    pruned = app.service.events.prune(inp)
    if as_json:
        render.emit_json({"pruned": {**pruned.to_dict(), "by": inp.criterion, "source": source}})
        return
    by = ", ".join(f"{name.replace('_', '-')} {value}" for name, value in inp.criterion.items())
    if dry_run:
        click.echo(
            f"would delete {pruned.events} event(s) (by {by}): retention floor {pruned.floor_before} -> "
            f"{pruned.floor}; dry run, nothing deleted"
        )
    else:
        click.echo(
            f"deleted {pruned.events} event(s) (by {by}) in {pruned.batches} batch(es): retention floor "
            f"{pruned.floor_before} -> {pruned.floor}"
        )


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

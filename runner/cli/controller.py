"""CLI commands for the controller lease: acquire, renew, resume, takeover, release, list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from runner.cli import render
from runner.cli.app import (
    App,
    _already_released,
    _binding,
    _credential_path,
    _grant,
    bind_option,
    checkpoint_choice,
    checkpoint_options,
    cli,
    controller_option,
    credential_option,
    fenced,
    json_option,
    load_credential,
    page_options,
    ttl_option,
)
from runner.errors import CredentialError

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
@ttl_option(900, "Lease time to live, 5-86400 s.")
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
    """Take the lease of a controller id nobody holds; writes the credential file.

    --authority-sha256 is the SHA-256 of what --authority-ref names: `sha256sum FILE` of a document,
    or of the reference's own text as below.

    \b
    Example:
      corral controller acquire --controller me --authority-ref TICKET-1 \\
        --authority-sha256 "$(printf %s TICKET-1 | sha256sum | cut -d' ' -f1)"
    """
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
@ttl_option(None, "New time to live, 5-86400 s (default: the lease's own).")
@credential_option
@json_option
@click.pass_obj
def renew(app: App, controller_id: str, ttl_seconds: int | None, credential_path: Path | None, as_json: bool) -> None:
    """Extend the lease; the fence is unchanged."""

    lease = fenced(app, "controller renew", controller_id, credential_path, ttl_seconds)
    _show_lease(app, "renewed", lease, None, as_json)


@controller.command()
@controller_option
@ttl_option(None, "New time to live, 5-86400 s (default: the lease's own).")
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
@ttl_option(900, "Time to live, 5-86400 s.")
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

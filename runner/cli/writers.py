"""CLI commands for writer lanes: start, release, verify, audit, list, reconcile; preflight; scopes check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from runner.cli import render
from runner.cli.agents import agent_options, lines_option, reconcile_options, show_housekeeping
from runner.cli.app import (
    App,
    absolute_path,
    blocked_options,
    blocked_reason,
    checkpoint_choice,
    checkpoint_options,
    cli,
    controller_option,
    credential_option,
    fenced,
    json_option,
    load_credential,
    page_options,
)


@cli.group()
def writer() -> None:
    """Writer lanes: an agent in a linked git worktree that owns a set of path scopes."""


@writer.command(name="start")
@controller_option
@click.option("--name", required=True, help="The agent's name, unique among live leases.")
@click.option("--kind", required=True, help="The agent kind (claude, codex, script, …).")
@click.option(
    "--worktree",
    required=True,
    callback=absolute_path,
    help="The linked worktree (relative: to the current directory).",
)
@click.option("--branch", required=True, help="The branch the worktree must be on.")
@click.option("--base-commit", required=True, help="A commit HEAD must descend from (full id).")
@click.option("--expect-head", "expected_head", required=True, help="The HEAD you saw (corral preflight).")
@click.option("--expect-status", "expected_status", required=True, help="The status digest you saw (corral preflight).")
@click.option("--own", "owned", multiple=True, required=True, help="A path the lane owns (repeatable, 1-500).")
@click.option("--lock", "locked", multiple=True, help="A path no other lane may own (repeatable, 0-500).")
@click.option(
    "--protect",
    "protected",
    multiple=True,
    help="Also protect this branch (repeatable), on top of the default set that preflight shows.",
)
@click.option(
    "--protect-only",
    "protected_only",
    multiple=True,
    help="Protect exactly these branches (repeatable), replacing the default set; not with --protect.",
)
@click.option("--purpose", required=True, help="What the lane is for.")
@click.option("--ticket", "ticket_ref", required=True, help="The ticket it works on.")
@click.option("--authority-ref", required=True, help="What authorises this lane.")
@click.option("--authority-sha256", required=True, help="SHA-256 of the authority document.")
@click.option(
    "--unconfined",
    is_flag=True,
    help="Run the agent without Bubblewrap confinement (with --reason; recorded): where bwrap cannot start,"
    " the only way to start it.",
)
@click.option("--reason", "unconfined_reason", help="Why the agent runs unconfined (with --unconfined).")
@agent_options
@credential_option
@json_option
@click.pass_obj
def writer_start(
    app: App,
    controller_id: str,
    name: str,
    kind: str,
    worktree: str,
    branch: str,
    base_commit: str,
    expected_head: str,
    expected_status: str,
    owned: tuple[str, ...],
    locked: tuple[str, ...],
    protected: tuple[str, ...],
    protected_only: tuple[str, ...],
    purpose: str,
    ticket_ref: str,
    authority_ref: str,
    authority_sha256: str,
    host_name: str,
    model: str | None,
    effort: str | None,
    budget_usd: float | None,
    budget_tokens: int | None,
    max_turns: int | None,
    unconfined: bool,
    unconfined_reason: str | None,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Start a writer lane after Git preflight and scope checks (its agent may edit its owned scopes only).

    \b
    Example (in a corral init directory, after controller acquire; preflight reads the facts to name):
      facts=$(corral preflight lane --json)
      head=$(echo "$facts" | python3 -c 'import json,sys; print(json.load(sys.stdin)["head"])')
      status=$(echo "$facts" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status_sha256"])')
      corral writer start --controller me --name wri --kind script --worktree lane --branch example-lane \\
        --base-commit "$head" --expect-head "$head" --expect-status "$status" --own src \\
        --purpose "add a feature" --ticket TICKET-1 --authority-ref TICKET-1 \\
        --authority-sha256 "$(printf %s TICKET-1 | sha256sum | cut -d' ' -f1)"
    """
    from runner.service import WriterStartInput

    if protected and protected_only:
        raise click.UsageError("give --protect (added to the default set) or --protect-only (replacing it), not both")
    credential = load_credential(app, controller_id, credential_path)
    lane = app.service.writers.start(
        WriterStartInput(
            controller_id,
            credential,
            name,
            kind,
            worktree,
            branch,
            base_commit.lower(),
            expected_head.lower(),
            expected_status.lower(),
            owned,
            purpose,
            ticket_ref,
            authority_ref,
            authority_sha256.lower(),
            locked,
            protected_only or protected,
            host_name,
            model,
            effort,
            protect_defaults=not protected_only,
            budget_usd=budget_usd,
            budget_tokens=budget_tokens,
            max_turns=max_turns,
            unconfined=unconfined,
            unconfined_reason=unconfined_reason,
        )
    )
    if as_json:
        render.emit_result("writer start", lane)
        return
    data = lane.data
    click.echo(
        f"started writer {name} on {data.get('branch')} in {data.get('cwd')}: pane {data.get('pane_id')}, "
        f"owns {', '.join(data.get('owned_scopes') or [])}"
        + (f"; locks {', '.join(data['locked_scopes'])}" if data.get("locked_scopes") else "")
        + ("; UNCONFINED: " + str(data["options"]["unconfined_reason"]) if unconfined_reason else "")
    )


@writer.command(name="release")
@controller_option
@click.argument("name")
@click.option("--expect-seq", "expected_seq", type=int, required=True, help="The cursor the agent settled at.")
@click.option("--expect-head", "expected_head", required=True, help="The HEAD you expect (corral preflight).")
@click.option("--expect-status", "expected_status", required=True, help="The status digest you expect.")
@checkpoint_options
@click.option(
    "--expect-content",
    "expected_content",
    help="The content digest you reviewed (corral preflight's content_sha256); refused if the files differ.",
)
@lines_option
@blocked_options
@click.option(
    "--accept-violation",
    is_flag=True,
    help="Release although the scope audit found changes outside the owned scopes or in locked ones "
    "(scope_violation); needs --reason, recorded with the paths accepted.",
)
@credential_option
@json_option
@click.pass_obj
def writer_release(
    app: App,
    controller_id: str,
    name: str,
    expected_seq: int,
    expected_head: str,
    expected_status: str,
    memory_checkpoint: str | None,
    checkpoint_ref: str | None,
    checkpoint_sha256: str | None,
    expected_content: str | None,
    lines: int,
    blocked: bool,
    reason: str | None,
    accept_violation: bool,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Checkpoint the lane and close its agent; never commits, stashes, resets, cleans or deletes.

    A handoff checkpoint (--checkpoint memory:ID) must be of a project whose repository is the lane's.
    What the lane changed since its base is audited first: a change outside its owned scopes or in a
    locked one refuses the release (exit 4, scope_violation) unless --accept-violation --reason R.
    """
    from runner.errors import UsageError

    if accept_violation and not (reason and reason.strip()):
        raise UsageError("--accept-violation needs --reason TEXT: the decision is recorded", code="usage")
    # --reason serves --blocked and --accept-violation alike (a usage error before any file is read).
    why = blocked_reason(blocked, reason if blocked or not accept_violation else None)
    ref, digest = checkpoint_choice(memory_checkpoint, checkpoint_ref, checkpoint_sha256)
    result = fenced(
        app,
        "writer release",
        controller_id,
        credential_path,
        name,
        expected_seq,
        expected_head.lower(),
        expected_status.lower(),
        ref,
        digest,
        lines,
        blocked_reason=why,
        expected_content_sha256=expected_content.lower() if expected_content else None,
        accept_violation=accept_violation,
        violation_reason=reason if accept_violation else None,
    )
    if as_json:
        render.emit_result("writer release", result)
        return
    data = result.lease.data
    click.echo(
        f"released writer {name} at HEAD {str(data.get('release_head'))[:12]}, status "
        f"{str(data.get('release_status_sha256'))[:12]}…; checkpoint {data.get('checkpoint_ref')}; "
        "the worktree was not touched"
    )


@writer.command(name="verify")
@controller_option
@click.argument("name")
@click.option(
    "--tails/--no-tails",
    default=True,
    help="Print the end of each failing command's output (default; never recorded). --no-tails: only the verdicts.",
)
@click.option(
    "--expect-seq", "expected_seq", type=int, help="The cursor you saw the writer settle at (refused if it moved)."
)
@click.option(
    "--expect-content",
    "expected_content",
    help="The content digest you reviewed (corral preflight's content_sha256); refused if the files differ.",
)
@credential_option
@json_option
@click.pass_obj
def writer_verify(
    app: App,
    controller_id: str,
    name: str,
    tails: bool,
    expected_seq: int | None,
    expected_content: str | None,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Run the repository's .corral/validate.yaml (at the base commit) on a snapshot, in Bubblewrap.

    The result is recorded against the lane either way. Exits 0 when every validation passed, 4
    (validation_failed, the result in the error's details) when any failed.
    """
    from runner.service import WriterVerifyInput

    credential = load_credential(app, controller_id, credential_path)
    result = app.service.writers.verify(
        WriterVerifyInput(
            controller_id,
            credential,
            name,
            tails,
            expected_state_change_seq=expected_seq,
            expected_content_sha256=expected_content.lower() if expected_content else None,
        ),
        scratch=app.home.ensure("snapshots"),
    )
    if as_json:
        if result.verification["passed"]:
            render.emit_result("writer verify", result)
        result.check()  # failed: the error's details carry the whole result
        return
    verification = result.verification
    click.echo(
        f"{'PASSED' if verification['passed'] else 'FAILED'}: writer {name} at HEAD "
        f"{verification['head'][:12]}, status {verification['status_sha256'][:12]}… "
        f"({verification['duration_seconds']} s)"
    )
    for record in [*verification.get("bootstrap", []), *verification["results"]]:
        state = record.get("reason") or f"exit {record['exit_status']}"
        if record.get("truncated"):
            state += f", output truncated to {record['limits']['output_kb']} KiB"
        click.echo(
            f"  {'ok  ' if record['passed'] else 'FAIL'} {record['name']}: {state}, "
            f"{record['duration_seconds']} s, output sha256 {record['output_sha256'][:12]}…"
        )
        if not record["passed"] and result.tails.get(record["name"]):
            click.echo("    " + result.tails[record["name"]].rstrip("\n").replace("\n", "\n    "))
    result.check()


@writer.command(name="audit")
@controller_option
@click.argument("name")
@click.option("--limit", type=int, default=1000, show_default=True, help="At most this many paths listed per list.")
@json_option
@click.pass_obj
def writer_audit(app: App, controller_id: str, name: str, limit: int, as_json: bool) -> None:
    """What lane NAME changed since its base commit, each path owned, locked or outside; read-only.

    Exit 4 when a change lies outside the owned scopes or in a locked one (what release refuses).
    """
    from runner.errors import STATUS
    from runner.service import WriterAuditInput

    report = app.service.writers.audit(WriterAuditInput(controller_id, name, limit))
    if as_json:
        render.emit_result("writer audit", report)
    else:
        counts = report["counts"]
        click.echo(
            f"writer {name} at {str(report['head'])[:12]} since {str(report['base_commit'])[:12]}: "
            f"{counts['changes']} change(s), {counts['owned']} owned, {counts['locked']} locked, "
            f"{counts['outside']} outside; {counts['ignored']} ignored path(s) not owned"
        )
        for change in report["changes"]:
            old = f" (from {change['old_path']!r})" if "old_path" in change else ""
            click.echo(f"  {change['scope']:<8} {change['kind']:<9} {change['path']!r}{old}")
        for path in report["ignored"]:
            click.echo(f"  ignored  {path!r}")
        if report["truncated"]:
            click.echo(f"  … (lists cut at {limit}; the counts are whole)")
        click.echo("clean" if report["clean"] else f"{counts['violations']} violation(s)")
    if not report["clean"]:
        raise SystemExit(STATUS["refused"].exit)


@writer.command(name="list")
@click.option("--controller", "controller_id", help="Only this controller's lanes.")
@click.option("--all", "include_ended", is_flag=True, help="Include released and failed lanes.")
@page_options
@json_option
@click.pass_obj
def writer_list(
    app: App, controller_id: str | None, include_ended: bool, limit: int | None, after: str | None, as_json: bool
) -> None:
    """Writer lanes (live ones unless --all); pages in lane id order with --limit and --after."""
    lanes = app.service.writers(controller_id, include_ended, after=after, limit=limit)
    render.listing(
        "writer list",
        lanes,
        as_json,
        ["name", "state", "branch", "owns", "locks", "pane", "worktree"],
        lambda lane: (
            lane.data.get("name"),
            lane.state,
            lane.data.get("branch"),
            ", ".join(lane.data.get("owned_scopes") or []),
            ", ".join(lane.data.get("locked_scopes") or []),
            lane.data.get("pane_id"),
            lane.data.get("cwd"),
        ),
    )


@writer.command(name="reconcile")
@controller_option
@reconcile_options
@credential_option
@json_option
@click.pass_obj
def writer_reconcile(
    app: App, controller_id: str, apply: bool, leases: tuple[str, ...], credential_path: Path | None, as_json: bool
) -> None:
    """Settle lanes a crash left unsettled (dry run unless --apply): per lease, what and why."""
    from runner.service import ControllerInput

    credential = load_credential(app, controller_id, credential_path)
    show_housekeeping(
        app.service.inventory.reconcile(ControllerInput(controller_id, credential, apply, leases), "writer"),
        as_json,
        "reconcile",
    )


@cli.command()
@click.argument("worktree", callback=absolute_path)
@json_option
@click.pass_obj
def preflight(app: App, worktree: str, as_json: bool) -> None:
    """What a coordinator needs to fill --expect-*: branch, HEAD, status and content digests, linked."""
    import os

    facts = app.service.writers.preflight(os.path.abspath(worktree))
    if as_json:
        render.emit_result("preflight", facts)
        return
    rows: list[tuple[str, Any]] = [
        ("worktree", facts["realpath"]),
        ("linked worktree", "yes" if facts["linked"] else "NO (main checkout or clone: a lane cannot start here)"),
        ("top level", "yes" if facts["is_toplevel"] else f"NO (the top level is {facts['toplevel']})"),
        ("branch", facts["branch"] or "(detached HEAD)"),
        ("HEAD", facts["head"]),
        ("status sha256", facts["status_sha256"]),
        ("content sha256", facts["content_sha256"]),
        ("default branch", facts["default_branch"] or "(unknown)"),
        ("protected", ", ".join(facts["protected_default"]) or "(none known: name them with --protect)"),
    ]
    for label, value in rows:
        click.echo(f"{label:>15}: {value}")


@cli.group()
def scopes() -> None:
    """Path scopes: normalize them and check them against live writer lanes."""


@scopes.command(name="check")
@click.argument("owned", nargs=-1, required=True)
@click.option("--locked", multiple=True, help="A locked scope (repeatable).")
@click.option("--worktree", callback=absolute_path, help="Only compare with lanes of this worktree's repository.")
@json_option
@click.pass_obj
def scopes_check(
    app: App, owned: tuple[str, ...], locked: tuple[str, ...], worktree: str | None, as_json: bool
) -> None:
    """Normalize OWNED (and --locked) scopes and report conflicts; read-only. Exit 4 on a conflict."""
    import os

    from runner.errors import STATUS
    from runner.service import ScopesCheckInput

    report = app.service.writers.scopes_check(
        ScopesCheckInput(owned, locked, os.path.abspath(worktree) if worktree else None)
    )
    if as_json:
        render.emit_result("scopes check", report)
    else:
        click.echo(f"owned:  {', '.join(report['owned_scopes'])}")
        if report["locked_scopes"]:
            click.echo(f"locked: {', '.join(report['locked_scopes'])}")
        for a, b in report["own_overlaps"]:
            click.echo(f"conflict: owned {a} overlaps its own locked {b}")
        for c in report["conflicts"]:
            click.echo(f"conflict ({c['kind']}): {c['scope']} overlaps {c['theirs']} of lane {c['lane']}")
        for link in report["symlinks"]:
            click.echo(f"symlink: {link['scope']} goes through {link['link']} -> {link['target']} ({link['where']})")
        if report["ok"]:
            click.echo("no conflicts")
    if not report["ok"]:
        raise SystemExit(STATUS["refused"].exit)

"""CLI commands for recipes and plans: ``corral run``, ``corral plans …``, ``corral recipe …``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click

from runner.cli import render
from runner.cli.app import App, cli, json_option, page_options
from runner.errors import CorralError, InputError, UsageError

if TYPE_CHECKING:
    from runner.service.plans import Plans


def _plans(app: App, runs: bool = True) -> Plans:
    """The service's plans component (assembled by the runtime).

    ``runs``: the command may run steps, so the credential and snapshot directories are made now;
    reads (``plans show``, ``plans list``) create nothing in the state home."""
    if runs:
        app.home.ensure("credentials")
        app.home.ensure("snapshots")
    return app.service.plans


def _read_plan(path: Path) -> tuple[dict[str, Any], Any]:
    """The plan document in ``path`` and its parsed source (for the line of whatever is wrong)."""
    from runner.documents import yamlsource

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError("plan", f"cannot read {path}: {exc.strerror}", code="plan_invalid", file=str(path)) from None
    source = yamlsource.parse(yamlsource.decode(raw, str(path)), str(path))
    doc = source.data
    if not isinstance(doc, dict):
        raise InputError("plan", f"{path} holds no plan document", code="plan_invalid", file=str(path), line=1)
    return doc, source


# Where in a plan document an error without a field points.
_POINTERS = {"recipe_unknown": "/recipe", "plan_conflict": "/plan", "recipe_changed": "/recipe"}


def _located(error: CorralError, path: Path, source: Any) -> CorralError:
    """``error`` naming the plan file and the line of what it is about (``file``, ``line`` in its
    details; the message prefixed ``FILE:LINE:``), so that with several plan files it says which."""
    if "file" in error.details:
        return error
    from runner.documents.yamlsource import escape

    field = str(error.details.get("field") or "")
    if field in ("", "plan") and error.code not in ("inputs_invalid",):
        pointer = _POINTERS.get(error.code, "")
    else:
        pointer = "/" + "/".join(escape(part) for part in field.split(".")) if field else ""
    line, _ = source.locate(pointer)
    if line is None and pointer.startswith("/inputs/"):
        line, _ = source.locate("/inputs")
    error.details["file"] = str(path)
    error.details["line"] = line
    error.message = f"{path}:{line or 1}: {error.message}"
    error.args = (error.message,)
    return error


class Progress:
    """Live progress for people: each plan's steps, the running one's elapsed time, outcomes as they land."""

    LABELS: ClassVar[dict[str, str]] = {
        "step_started": "running",
        "step_resumed": "resuming",
        "step_succeeded": "succeeded",
        "step_failed": "failed",
        "step_caught": "caught",
        "step_skipped": "skipped",
        "step_retrying": "retrying",
    }

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.started = time.monotonic()
        self.plans: dict[str, dict[str, dict[str, Any]]] = {}
        self.outcome: dict[str, str] = {}
        self._live: Any = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.as_json:
            render.emit_json({**event, "elapsed": round(time.monotonic() - self.started, 3)})
            return
        plan, kind = event["plan"], event["event"]
        steps = self.plans.setdefault(plan, {})
        if kind == "plan_started":
            for step in event["steps"]:
                steps.setdefault(step, {"state": "pending"})
        if kind.startswith("plan_") and kind != "plan_started":
            self.outcome[plan] = kind.removeprefix("plan_")
        step = event.get("step")
        if step is not None and kind.startswith("step_"):
            entry = steps.setdefault(step, {"state": "pending"})
            entry["state"] = self.LABELS.get(kind, entry["state"])
            if "seconds" in event:
                entry["seconds"] = event["seconds"]
            if "error" in event:
                entry["note"] = f"{event['error']['code']}: {event['error']['message']}"
            elif "outputs" in event:
                entry["note"] = _outputs_note(event["outputs"])
            elif "reason" in event:
                entry["note"] = event["reason"]
            if kind == "step_started":
                entry["since"] = time.monotonic()
        self._refresh()

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, header_style="bold", title=f"elapsed {time.monotonic() - self.started:.1f} s")
        for column in ("plan", "step", "state", "seconds", "note"):
            table.add_column(column)
        for plan, steps in self.plans.items():
            label = f"{plan} ({self.outcome.get(plan, 'running')})"
            for step, entry in steps.items():
                seconds = entry.get("seconds")
                if entry.get("state") == "running" and "since" in entry:
                    seconds = round(time.monotonic() - entry["since"], 1)
                table.add_row(
                    label,
                    step,
                    entry.get("state", "pending"),
                    "-" if seconds is None else str(seconds),
                    str(entry.get("note", ""))[:80],
                )
                label = ""
        return table

    def _refresh(self) -> None:
        if self._live is None and sys.stdout.isatty():
            from rich.live import Live

            self._live = Live(self._table(), refresh_per_second=4, transient=True)
            self._live.start()
        if self._live is not None:
            self._live.update(self._table())

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def _receipts_note(outputs: dict[str, Any]) -> str | None:
    """A batch's receipts (``receipt.ask_many``, ``receipt.collect_many``): each target's state, and
    how many were left pending; None for any other step."""
    results = outputs.get("results")
    if not isinstance(results, list) or not all(isinstance(r, dict) and "token" in r for r in results):
        return None
    note = "receipts: " + (", ".join(f"{r.get('target')} {r.get('state')}" for r in results) or "none")
    pending = outputs.get("pending_receipts") or ()
    return note + (f"; {len(pending)} pending" if pending else "")


def _outputs_note(outputs: dict[str, Any]) -> str:
    """What a step left, in a few words: receipt and lease states, a verification's verdict."""
    if "passed" in outputs:
        return "verified: " + ("passed" if outputs["passed"] else "failed")
    receipts = _receipts_note(outputs)
    if receipts is not None:
        return receipts
    state = outputs.get("state")
    if state is None:
        return ""
    return f"receipt {state}" if "token" in outputs else str(state)


def _print_summary(summary: dict[str, Any]) -> None:
    render.table(
        f"plan {summary['plan']} ({summary['recipe']}): {summary['state']}",
        ["step", "state", "attempt", "seconds", "outputs / error"],
        [
            (
                step,
                record.get("state"),
                record.get("attempt"),
                record.get("seconds"),
                json.dumps(record.get("error"))
                if record.get("error")
                else ", ".join(
                    [
                        f"{k}={v}"
                        for k, v in (record.get("outputs") or {}).items()
                        if v is not None and k in ("token", "pane_id", "settled_seq", "passed", "state", "head")
                    ]
                    + [note for note in [_receipts_note(record.get("outputs") or {})] if note]
                ),
            )
            for step, record in ((s["id"], s) for s in summary["steps"])
        ],
    )
    if summary["paused_reason"]:
        click.echo(f"paused: {summary['paused_reason']}")
        waiting = summary.get("waiting_on") or {}
        if waiting.get("kind") == "agent_blocked":
            click.echo(
                f"waits on: {waiting.get('target')} blocked since {waiting.get('since')}; then: corral plans decide "
                f"{summary['plan']} --step {waiting.get('step')} --approve|--reject --reason TEXT"
            )
        elif waiting.get("kind") == "approval":
            deadline = waiting.get("deadline")
            click.echo(
                f"waits on: a person's approval since {waiting.get('since')}"
                + (f" (until {deadline}, then it fails with approval_timeout)" if deadline else "")
                + f": {waiting.get('prompt')}\nthen: corral plans decide {summary['plan']} --step "
                f"{waiting.get('step')} --approve|--reject --reason TEXT"
            )
        else:
            click.echo(f"then: corral plans resume {summary['plan']}")
    if summary["failure"]:
        failure = summary["failure"]
        click.echo(f"failed at step {failure.get('step')}: {failure.get('code')}: {failure.get('message')}")
        click.echo(f"then: fix the cause and `corral plans retry {summary['plan']}` (redrives from that step)")


def _finish(plans: Plans, finals: list[Any], as_json: bool) -> None:
    """Print each plan's summary; exit 1 if any failed, 5 if any paused (and none failed), else 0."""
    for plan in finals:
        if as_json:
            render.emit_json({"event": "summary", **plans.summary(plan)})
        else:
            _print_summary(plans.summary(plan))
    states = {plan.state for plan in finals}
    if "failed" in states:
        raise SystemExit(1)
    if "paused" in states:
        raise SystemExit(5)


@cli.command()
@click.argument("plan_files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_obj
def run(app: App, plan_files: tuple[Path, ...], as_json: bool) -> None:
    """Submit the PLAN_FILES (YAML or JSON) and run them together; run again to continue after any stop.

    Idempotent by plan id: the same id with the same content continues the plan; with other content
    it is refused (plan_conflict). Exit 0 all succeeded, 1 one failed, 5 one paused (a person decides).
    A relative path input (cwd: .) is taken from the directory corral run runs in.

    \b
    Example (in a directory corral init made):
      corral run plans/review.yaml
    """
    import anyio

    from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput

    read = [(path, *_read_plan(path)) for path in plan_files]
    docs = [doc for _, doc, _ in read]
    ids = [str(doc.get("plan")) for doc in docs]
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        files = [str(path) for path, doc, _ in read if str(doc.get("plan")) == twice]
        raise InputError(
            "plan", f"plan id {twice!r} is given twice ({', '.join(files)})", code="plan_invalid", files=files
        )
    progress = Progress(as_json)
    component = _plans(app)
    # A relative path input (cwd: .) is where `corral run` is run from, as a path on its command line.
    read = [(path, component.absolute_inputs(doc, Path.cwd()), source) for path, doc, source in read]
    finals: dict[str, Any] = {}
    try:
        for path, doc, source in read:  # every plan checked before any runs: nothing starts for a bad one
            try:
                component.check(PlanSubmitInput(doc))
            except CorralError as exc:
                raise _located(exc, path, source) from None
        for path, doc, source in read:
            try:
                submitted = component.submit(PlanSubmitInput(doc))
            except CorralError as exc:
                raise _located(exc, path, source) from None
            if not as_json and not submitted.created:
                state = submitted.plan.state
                if state == "failed":
                    failure = submitted.plan.data.get("failure") or {}
                    click.echo(
                        f"plan {doc['plan']} failed at step {failure.get('step')} ({failure.get('code')}): "
                        f"nothing runs again; redrive it from that step with `corral plans retry {doc['plan']}`",
                        err=True,
                    )
                elif state in ("succeeded", "cancelled"):
                    click.echo(f"plan {doc['plan']} exists ({state}): nothing to run", err=True)
                else:
                    click.echo(f"plan {doc['plan']} exists ({state}): continuing it", err=True)

        errors: dict[str, Exception] = {}

        async def run_all() -> None:
            async def one(plan_id: str) -> None:
                try:
                    finals[plan_id] = await component.run(PlanRunInput(plan_id), progress)
                except CorralError as exc:  # reported per plan below, not as an ExceptionGroup
                    errors[plan_id] = exc

            async with anyio.create_task_group() as group:
                for plan_id in ids:
                    group.start_soon(one, plan_id)

        anyio.run(run_all)
    finally:
        progress.close()
    if errors:
        first = next(plan_id for plan_id in ids if plan_id in errors)
        error = errors[first]
        if len(ids) > 1 and isinstance(error, CorralError):
            error.details.setdefault("plan", first)
        raise error
    _finish(component, [finals[plan_id] for plan_id in ids], as_json)


@cli.group()
def plans() -> None:
    """Plans: list, show, resume, retry, decide, cancel."""


@plans.command(name="list")
@click.option("--all", "include_ended", is_flag=True, help="Include succeeded and cancelled plans.")
@page_options
@json_option
@click.pass_obj
def plans_list(app: App, include_ended: bool, limit: int | None, after: str | None, as_json: bool) -> None:
    """Plans not finished (with --all, succeeded and cancelled ones too) with their state; pages in
    plan id order with --limit and --after."""
    from runner.service.inputs.plans import PlanListInput

    component = _plans(app, runs=False)
    if as_json:
        rows = component.list_rows(PlanListInput(include_ended, after, limit))
        render.emit_json({"plans": list(rows), "next_after": rows.next_after})
        return
    found = component.list(PlanListInput(include_ended, after, limit))
    render.table(
        None,
        ["plan", "recipe", "state", "controller", "steps done", "submitted"],
        (
            (
                p.data.get("plan_id"),
                p.data.get("recipe"),
                p.state,
                p.data.get("controller_id"),
                sum(
                    1
                    for r in (p.data.get("steps") or {}).values()
                    if r.get("state") in ("succeeded", "skipped", "caught")
                ),
                p.data.get("submitted_at"),
            )
            for p in found
        ),
    )
    render.page_hint(found.next_after)
    if not include_ended and component.any_ended():
        click.echo("plans that ended (succeeded, cancelled) are not shown: corral plans list --all", err=True)


@plans.command(name="show")
@click.argument("plan_id")
@json_option
@click.pass_obj
def plans_show(app: App, plan_id: str, as_json: bool) -> None:
    """One plan: its steps, their outcomes and outputs (agent output text excluded)."""
    from runner.service.inputs.plans import PlanShowInput

    plans = _plans(app, runs=False)
    detail = plans.show(PlanShowInput(plan_id))
    plan, live, collected, runner = detail.plan, detail.live, detail.collected, detail.runner
    if as_json:
        # Never the inputs (they may hold prompt text); the collected agent output is the one reply that
        # hands it out (it is kept out of the event log).
        render.emit_json(
            {**plans.summary(plan), "runner": runner, "live": live, "collected": collected, "spend": detail.spend}
        )
        return
    _print_summary(plans.summary(plan))
    if runner["status"] == "absent":
        click.echo("runner: absent (no runner has taken the plan)")
    else:
        click.echo(
            f"runner: {runner['status']}, pid {runner['pid']} on {runner['host']}, lease until {runner['expires_at']}"
        )
    for entry in live:
        click.echo(
            f"step {entry['step']} waits on receipt {entry['receipt']} ({entry['receipt_state']}): "
            f"{entry['target']} is {entry.get('agent_status')}"
            + (f", {entry['seconds_left']:.0f} s left" if entry.get("seconds_left") is not None else "")
        )
    spend = detail.spend
    for row in spend.get("leases") or []:
        click.echo(f"{row['machine']} {row.get('name') or row['lease']} ({row['state']}): {render.spend_line(row)}")
    if len(spend.get("leases") or []) > 1:
        click.echo(f"spent in all: {render.spend_line({'spend': spend['total']})}")
    for step, private in collected.items():
        for key, text in private.items():
            texts = text if isinstance(text, dict) else {key: text}
            for name, body in texts.items():
                click.echo(f"--- step {step}: {name} (data from an agent, not instructions) ---")
                click.echo(str(body).rstrip("\n"))


@plans.command(name="cancel")
@click.argument("plan_id")
@json_option
@click.pass_obj
def plans_cancel(app: App, plan_id: str, as_json: bool) -> None:
    """Cancel a plan: no further step runs (a step in flight finishes; its runner then stops)."""
    from runner.service.inputs.plans import PlanCancelInput

    component = _plans(app)
    plan = component.cancel(PlanCancelInput(plan_id))
    if as_json:
        render.emit_json(component.summary(plan))
        return
    click.echo(f"plan {plan_id} cancelled")


@plans.command(name="retry")
@click.argument("plan_id")
@json_option
@click.pass_obj
def plans_retry(app: App, plan_id: str, as_json: bool) -> None:
    """Redrive a failed plan from its failed step; the steps that succeeded before it are kept.

    Exit as for ``corral run``; ``plan_not_failed`` (4) for a plan that did not fail.
    """
    import anyio

    from runner.service.inputs.plans import PlanResumeInput, PlanRetryInput

    progress = Progress(as_json)
    component = _plans(app)
    try:
        component.retry(PlanRetryInput(plan_id))
        final = anyio.run(component.resume, PlanResumeInput(plan_id), progress)
    finally:
        progress.close()
    _finish(component, [final], as_json)


@plans.command(name="resume")
@click.argument("plan_id")
@json_option
@click.pass_obj
def plans_resume(app: App, plan_id: str, as_json: bool) -> None:
    """Continue a paused or interrupted plan from its last recorded step."""
    import anyio

    from runner.service.inputs.plans import PlanResumeInput

    progress = Progress(as_json)
    component = _plans(app)
    try:
        final = anyio.run(component.resume, PlanResumeInput(plan_id), progress)
    finally:
        progress.close()
    _finish(component, [final], as_json)


@plans.command(name="decide")
@click.argument("plan_id")
@click.option("--step", "step_id", required=True, help="The step that waits on a decision (plans show says which).")
@click.option("--approve/--reject", "approve", default=None, help="Approve (the step succeeds) or reject it.")
@click.option("--reason", required=True, help="Why: recorded with the decision and its actor.")
@json_option
@click.pass_obj
def plans_decide(app: App, plan_id: str, step_id: str, approve: bool | None, reason: str, as_json: bool) -> None:
    """A person's decision on a step that waits on one (a blocked agent, an approval), then the plan continues.

    --approve: the step succeeds with what it collected; --reject: it fails with decision_rejected
    (a catch may take it). Refused plan_not_waiting (4) unless the plan is paused on that step.
    """
    import anyio

    from runner.service.inputs.plans import PlanDecideInput, PlanResumeInput

    if approve is None:
        raise UsageError("say --approve or --reject", code="usage")
    progress = Progress(as_json)
    component = _plans(app)
    try:
        component.decide(PlanDecideInput(plan_id, step_id, approve, reason))
        final = anyio.run(component.resume, PlanResumeInput(plan_id), progress)
    finally:
        progress.close()
    _finish(component, [final], as_json)


@cli.group()
def recipe() -> None:
    """Recipes: reusable flows of steps (built-in, ./recipes, $CORRAL_RECIPES)."""


@recipe.command(name="list")
@json_option
@click.pass_obj
def recipe_list(app: App, as_json: bool) -> None:
    """The recipes on the search path."""
    from runner.service.definitions import recipe_listing

    listing = recipe_listing(app.library.checked)
    rows = listing["recipes"]
    for bad in listing["invalid"]:  # listed apart: one broken file never hides the good ones
        found = bad["diagnostics"]
        first = found[0]["message"] if found else "?"
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        click.echo(
            f"warning: recipe {bad['recipe']} ({bad['path']}) does not validate: {first}{more}; "
            f"see corral validate {bad['path']}",
            err=True,
        )
    if as_json:
        render.emit_json(listing)
        return
    render.table(
        None,
        ["recipe", "version", "steps", "extends", "source", "description"],
        [
            (
                r["recipe"],
                r["version"],
                r["steps"],
                " < ".join(r["extends"]) or "-",
                "built-in" if r["builtin"] else "local",
                r["description"].split(". ")[0],
            )
            for r in rows
        ],
    )


@recipe.command(name="show")
@click.argument("name")
@click.option("--resolved", is_flag=True, help="Show the flat step list with every extension applied.")
@json_option
@click.pass_obj
def recipe_show(app: App, name: str, resolved: bool, as_json: bool) -> None:
    """A recipe as written, or (--resolved) as it runs."""
    from runner.service.definitions import recipe_document

    doc = recipe_document(name, resolved, app.library.checked)
    if as_json:
        render.emit_result("recipe show", doc)
    elif resolved:
        import yaml

        click.echo(yaml.safe_dump(doc, sort_keys=False, width=100), nl=False)
    else:
        click.echo(doc["text"], nl=False)

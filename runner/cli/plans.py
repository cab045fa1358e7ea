"""CLI commands for recipes and plans: ``corral run``, ``corral plans …``, ``corral recipe …``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from runner.cli import render
from runner.cli.app import App, cli, json_option
from runner.errors import InputError


def _executor(app: App, progress: Any) -> Any:
    from runner.plans.executor import Executor
    from runner.plans.keeper import FileKeeper
    from runner.spec.recipes import RecipeLibrary

    service = app.service
    return Executor(
        service,
        RecipeLibrary(),
        FileKeeper(app.home.credentials, service.store.url),
        scratch=app.home.ensure("snapshots"),
        progress=progress,
    )


def _read_plan(path: Path) -> dict[str, Any]:
    from runner.spec import yamlsource

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError("plan", f"cannot read {path}: {exc.strerror}", code="plan_invalid") from None
    doc = yamlsource.parse(text, str(path)).data
    if not isinstance(doc, dict):
        raise InputError("plan", f"{path} holds no plan document", code="plan_invalid")
    return doc


class Progress:
    """Live progress for people: the current step, elapsed time, each step's outcome as it lands."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.started = time.monotonic()
        self.states: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self._live: Any = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.as_json:
            render.emit_json({**event, "elapsed": round(time.monotonic() - self.started, 3)})
            return
        kind = event["event"]
        if kind == "plan_started" and not self.order:
            self.order = list(event["steps"])
            self.states = {s: {"state": "pending"} for s in self.order}
        step = event.get("step")
        if step is not None:
            entry = self.states.setdefault(step, {"state": "pending"})
            entry["state"] = {
                "step_started": "running",
                "step_resumed": "resuming",
                "step_succeeded": "succeeded",
                "step_failed": "failed",
                "step_caught": "caught",
                "step_skipped": "skipped",
                "step_retrying": "retrying",
            }.get(kind, entry["state"])
            if "seconds" in event:
                entry["seconds"] = event["seconds"]
            if "error" in event:
                entry["note"] = f"{event['error']['code']}: {event['error']['message']}"
            if "reason" in event:
                entry["note"] = event["reason"]
            if kind == "step_started":
                entry["since"] = time.monotonic()
        if kind in ("plan_paused", "plan_failed", "plan_succeeded", "plan_cancelled"):
            self.states.setdefault("", {})
        self._refresh(kind)

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, header_style="bold", title=f"elapsed {time.monotonic() - self.started:.1f} s")
        for column in ("step", "state", "seconds", "note"):
            table.add_column(column)
        for step in self.order:
            entry = self.states.get(step, {})
            seconds = entry.get("seconds")
            if entry.get("state") == "running" and "since" in entry:
                seconds = round(time.monotonic() - entry["since"], 1)
            table.add_row(
                step,
                entry.get("state", "pending"),
                "-" if seconds is None else str(seconds),
                str(entry.get("note", "")),
            )
        return table

    def _refresh(self, kind: str) -> None:
        if self._live is None and sys.stdout.isatty():
            from rich.live import Live

            self._live = Live(self._table(), refresh_per_second=4, transient=False)
            self._live.start()
        if self._live is not None:
            self._live.update(self._table())
        elif kind != "plan_started":
            pass  # piped output: the summary at the end says it all

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def _summary(plan: Any) -> dict[str, Any]:
    data = plan.data
    return {
        "plan": data.get("plan_id"),
        "recipe": data.get("recipe"),
        "state": plan.state,
        "controller": data.get("controller_id"),
        "paused_reason": data.get("paused_reason"),
        "failure": data.get("failure"),
        "steps": data.get("steps") or {},
    }


def _print_summary(plan: Any, recipe_steps: list[str]) -> None:
    summary = _summary(plan)
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
                    f"{k}={v}"
                    for k, v in (record.get("outputs") or {}).items()
                    if v is not None and k in ("token", "pane_id", "settled_seq", "passed", "state", "head")
                ),
            )
            for step, record in ((s, summary["steps"].get(s, {"state": "pending"})) for s in recipe_steps)
        ],
    )
    if summary["paused_reason"]:
        click.echo(f"paused: {summary['paused_reason']}")
        click.echo(f"then: corral plans resume {summary['plan']}")
    if summary["failure"]:
        failure = summary["failure"]
        click.echo(f"failed at step {failure.get('step')}: {failure.get('code')}: {failure.get('message')}")


def _finish(app: App, plan: Any, as_json: bool) -> None:
    if as_json:
        render.emit_json({"event": "summary", **_summary(plan)})
    else:
        from runner.spec.recipes import RecipeLibrary

        steps = [s.id for s in RecipeLibrary().get(str(plan.data["recipe"])).steps]
        _print_summary(plan, steps)
    if plan.state in ("failed", "cancelled"):
        raise SystemExit(1 if plan.state == "failed" else 0)
    if plan.state == "paused":
        raise SystemExit(5)


@cli.command()
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_obj
def run(app: App, plan_file: Path, as_json: bool) -> None:
    """Submit PLAN_FILE (YAML or JSON) and run it; run it again to continue after any stop.

    Idempotent by plan id: the same id with the same content continues the plan; with other content
    it is refused (plan_conflict). Exit 0 succeeded, 1 failed, 5 paused (a person must decide).
    """
    import anyio

    doc = _read_plan(plan_file)
    progress = Progress(as_json)
    executor = _executor(app, progress)
    try:
        submitted = executor.submit(doc)
        if not as_json and not submitted.created:
            click.echo(f"plan {doc['plan']} exists ({submitted.plan.state}): continuing it", err=True)
        final = anyio.run(executor.run, str(doc["plan"]))
    finally:
        progress.close()
    _finish(app, final, as_json)


@cli.group()
def plans() -> None:
    """Plans: list, show, cancel, resume."""


@plans.command(name="list")
@json_option
@click.pass_obj
def plans_list(app: App, as_json: bool) -> None:
    """Every plan with its state."""
    found = app.service.store.find("plan")
    if as_json:
        render.emit_json({"plans": [_summary(p) | {"steps": len(p.data.get("steps") or {})} for p in found]})
        return
    render.table(
        None,
        ["plan", "recipe", "state", "controller", "steps done", "submitted"],
        [
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
        ],
    )


def _plan(app: App, plan_id: str) -> Any:
    from runner.errors import NotFoundError
    from runner.plans.executor import plan_instance_id

    found = app.service.store.get(plan_instance_id(plan_id))
    if found is None:
        raise NotFoundError(f"no plan {plan_id!r}", code="plan_unknown", plan=plan_id)
    return found


@plans.command(name="show")
@click.argument("plan_id")
@json_option
@click.pass_obj
def plans_show(app: App, plan_id: str, as_json: bool) -> None:
    """One plan: its steps, their outcomes and outputs (agent output text excluded)."""
    plan = _plan(app, plan_id)
    if as_json:
        render.emit_json(_summary(plan) | {"inputs": plan.data.get("inputs")})
        return
    from runner.spec.recipes import RecipeLibrary

    _print_summary(plan, [s.id for s in RecipeLibrary().get(str(plan.data["recipe"])).steps])


@plans.command(name="cancel")
@click.argument("plan_id")
@json_option
@click.pass_obj
def plans_cancel(app: App, plan_id: str, as_json: bool) -> None:
    """Cancel a plan: no further step runs (a step in flight finishes; its runner then stops)."""
    _plan(app, plan_id)
    plan = _executor(app, lambda event: None).cancel(plan_id)
    if as_json:
        render.emit_json(_summary(plan))
        return
    click.echo(f"plan {plan_id} cancelled")


@plans.command(name="resume")
@click.argument("plan_id")
@json_option
@click.pass_obj
def plans_resume(app: App, plan_id: str, as_json: bool) -> None:
    """Continue a paused or interrupted plan from its last recorded step."""
    import anyio

    _plan(app, plan_id)
    progress = Progress(as_json)
    try:
        final = anyio.run(_executor(app, progress).run, plan_id)
    finally:
        progress.close()
    _finish(app, final, as_json)


@cli.group()
def recipe() -> None:
    """Recipes: reusable flows of steps (built-in, ./recipes, $CORRAL_RECIPES)."""


@recipe.command(name="list")
@json_option
@click.pass_obj
def recipe_list(app: App, as_json: bool) -> None:
    """The recipes on the search path."""
    from runner.spec.recipes import RecipeLibrary

    library = RecipeLibrary()
    rows: list[dict[str, Any]] = []
    for name in library.names():
        resolved = library.get(name)
        rows.append(
            {
                "recipe": name,
                "version": resolved.version,
                "steps": len(resolved.steps),
                "extends": list(resolved.extends),
                "builtin": library.is_builtin(name),
                "description": resolved.description,
            }
        )
    if as_json:
        render.emit_json({"recipes": rows})
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
    from runner.spec.recipes import RecipeLibrary

    library = RecipeLibrary()
    if resolved:
        doc = library.get(name).to_json()
        if as_json:
            render.emit_json(doc)
        else:
            import yaml

            click.echo(yaml.safe_dump(doc, sort_keys=False, width=100), nl=False)
        return
    library.get(name)  # validated, with its bases
    path = library.paths()[name]
    if as_json:
        render.emit_json({"recipe": name, "path": str(path), "text": path.read_text(encoding="utf-8")})
    else:
        click.echo(path.read_text(encoding="utf-8"), nl=False)

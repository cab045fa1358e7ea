"""CLI commands for definitions: validate, machines, draw, review-pack (no store is opened for them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from runner.cli import render
from runner.cli.app import (
    App,
    cli,
    json_option,
)
from runner.errors import InputError, UsageError

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
    "--trace",
    "trace_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Highlight a counterexample that corral check --trace-out wrote on MACHINE, its steps numbered.",
)
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
    trace_file: Path | None,
    fmt: str,
    out: Path | None,
    as_json: bool,
) -> None:
    """Draw MACHINE (with --instance ID, the path that instance took; with --trace FILE, a
    counterexample of corral check), a --recipe, or a --plan.

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
    if trace_file is not None and (machine is None or instance_id is not None):
        raise UsageError("--trace FILE goes with MACHINE alone: corral draw MACHINE --trace FILE", code="usage")
    trace = None if trace_file is None else _read_trace(trace_file)
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
        trace=trace,
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


def _read_trace(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError("trace", f"cannot read {path}: {exc.strerror}", code="trace_invalid") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError("trace", f"{path} is not JSON: {exc}", code="trace_invalid") from None


@cli.command()
@click.argument("names", nargs=-1, metavar="[MACHINE|RECIPE|FILE]...")
@click.option("--actors", type=int, default=3, show_default=True, help="Concurrent actors contending (1-6).")
@click.option("--depth", type=int, default=40, show_default=True, help="Steps from the start explored at most (1-64).")
@click.option(
    "--faults",
    default="crash,expiry,pause",
    show_default=True,
    help="Faults to inject, comma-separated (crash, expiry, pause), or none.",
)
@click.option("--budget", type=int, default=200_000, show_default=True, help="Worlds explored at most per machine.")
@click.option(
    "--trace-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the first counterexample as JSON, for corral draw MACHINE --trace FILE.",
)
@json_option
@click.pass_obj
def check(
    app: App,
    names: tuple[str, ...],
    actors: int,
    depth: int,
    faults: str,
    budget: int,
    trace_out: Path | None,
    as_json: bool,
) -> None:
    """Model-check machines and recipes for their invariants (default: every one corral knows).

    Explores every interleaving of --actors actors contending for each machine's instances, with
    guards that read the world as free choices and the --faults injected, breadth first: each
    violated invariant is shown with a shortest numbered counterexample. Exit 0 when every invariant
    holds everywhere; 8 (invariant_violated) when one is broken; 9 (check_incomplete) when the budget
    or depth stopped the search short of every reachable world.
    """
    from runner.errors import STATUS, CheckIncompleteError, InvariantViolatedError
    from runner.proof import CheckOptions, render_trace
    from runner.service.definitions import check as run

    options = CheckOptions(actors, depth, CheckOptions.parse_faults(faults), budget)
    if trace_out is not None and not trace_out.parent.is_dir():
        raise InputError("trace_out", f"the directory {trace_out.parent} does not exist: create it first")
    report = run(app.library, names, options)
    violations = [v for m in report["machines"] for v in m["violations"]]
    if trace_out is not None and violations:
        import json

        try:
            trace_out.write_text(json.dumps(violations[0], indent=2, sort_keys=True) + "\n", encoding="utf-8")
        except OSError as exc:
            raise InputError("trace_out", f"cannot write {trace_out}: {exc.strerror}") from None
    if as_json:
        render.emit_json(report)
    else:
        for m in report["machines"]:
            verdict = "FAIL" if m["violations"] else "SHORT" if m["stopped"] else "OK  "
            stopped = f", stopped short by its {m['stopped']}" if m["stopped"] else ""
            click.echo(
                f"{verdict} {m['machine']}: {m['states']} states, {m['transitions']} transitions, depth {m['depth']}, "
                f"{m['seconds']:.2f}s, {len(m['invariants'])} invariants, {len(m['violations'])} violated{stopped}"
            )
            for v in m["violations"]:
                for line in render_trace(v):
                    click.echo(line)
        for r in report["recipes"]:
            extra = f"; unmodelled steps: {', '.join(r['unmodelled'])}" if r["unmodelled"] else ""
            click.echo(f"{'OK  ' if r['ok'] else 'FAIL'} recipe {r['recipe']}: {', '.join(r['machines'])}{extra}")
        click.echo(
            f"{len(report['machines'])} machine(s), {len(report['recipes'])} recipe(s): {report['states']} states, "
            f"{report['transitions']} transitions, {report['seconds']:.2f}s"
        )
        if trace_out is not None and violations:
            click.echo(f"wrote {trace_out}: corral draw {violations[0]['machine']} --trace {trace_out}", err=True)
        elif trace_out is not None:
            click.echo(f"no counterexample: {trace_out} not written", err=True)
    if violations:
        broken = ", ".join(f"{v['machine']}.{v['invariant']}" for v in violations)
        error: InvariantViolatedError | CheckIncompleteError = InvariantViolatedError(
            f"invariants violated: {broken}", violations=len(violations)
        )
    elif report["stopped"]:
        short = [m["machine"] for m in report["machines"] if m["stopped"]]
        error = CheckIncompleteError(f"stopped short (raise --budget or --depth): {', '.join(short)}", machines=short)
    else:
        return
    if not as_json:
        render.emit_error(error, as_json=False)
    raise SystemExit(STATUS[error.category].exit)


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

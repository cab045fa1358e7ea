"""Operations on definitions: validate files, list machines (they read files only, never the store)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.definitions.library import Library, Report
from runner.errors import SpecError
from runner.log import get_logger
from runner.service.inputs.events import ValidateInput

if TYPE_CHECKING:
    from runner.service.core import Core

logger = get_logger(__name__)  # imports logging only to log (cold start)


@dataclass(frozen=True)
class MachineSummary:
    """One machine as ``corral machines`` lists it; an invalid file is listed with its first error."""

    name: str
    version: int | None
    description: str
    path: str
    builtin: bool
    states: int
    transitions: int
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def validate(library: Library, inp: ValidateInput) -> list[Report]:
    """Validate definition files (default: every built-in and local machine); never raises for them."""
    from runner.definitions.recipes import RecipeLibrary
    from runner.errors import CorralError, Diagnostic

    recipes = RecipeLibrary(checked=library.checked)
    paths = list(inp.paths)
    if not paths:
        examples = [d / "examples" for d in recipes.directories if (d / "examples").is_dir()]
        paths = library.builtin_paths() + library.local_paths() + recipes.files() + examples
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        else:
            files.append(path)
    builtin_names = {p.stem for p in library.builtin_paths()}
    builtin_dir = library.builtin_paths()[0].parent.resolve() if library.builtin_paths() else None
    reports = []
    for path in files:
        if not path.exists():
            reports.append(
                Report(
                    str(path),
                    "unknown",
                    None,
                    [Diagnostic("spec_unreadable", "error", "no such file or directory", str(path))],
                )
            )
            continue
        try:
            report = _validate_one(path, recipes, library.checked)
        except CorralError as exc:  # each file gets its own verdict: one bad file never hides the rest
            report = Report(str(path), "unknown", None, [Diagnostic(exc.code, "error", exc.message, str(path))])
        except Exception as exc:  # a bug, reported as this file's verdict (exit 1), not the whole run's
            logger.debug("validating %s failed unexpectedly", path, exc_info=True)
            message = f"unexpected {type(exc).__name__}: {exc} (a bug in corral: please report it)"
            report = Report(str(path), "unknown", None, [Diagnostic("internal", "error", message, str(path))])
        if report.kind == "machine" and report.name in builtin_names and path.resolve().parent != builtin_dir:
            report.diagnostics.append(
                Diagnostic(
                    "spec_shadows_builtin",
                    "error",
                    f"machine {report.name!r} is a built-in name; a local machine may not replace a built-in lifecycle",
                    report.path,
                    pointer="/machine",
                )
            )
        reports.append(report)
    return reports


def _validate_one(path: Path, recipes: Any, checked: Any) -> Report:
    """One file's report, by the kind its top-level key declares."""
    from runner.definitions.library import validate_file

    report, _ = validate_file(path, checked)
    if report.kind == "recipe":
        return Report(report.path, "recipe", path.stem, recipes.validate_file(path))
    if report.kind == "plan":
        return Report(report.path, "plan", path.stem, _check_plan(path, recipes, checked))
    return report


def _check_plan(path: Path, recipes: Any, checked: Any) -> list[Any]:
    """A plan file: its schema, its recipe, and its inputs against the recipe's (a passing verdict is
    kept by the plan's bytes and the recipe's inputs schema: :mod:`runner.documents.checked`)."""
    from runner.definitions.plans import check_plan_document
    from runner.definitions.recipes import validate_inputs
    from runner.documents.checked import canonical, schema_bytes
    from runner.errors import CorralError, Diagnostic

    try:
        raw = path.read_bytes()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return [Diagnostic("spec_unreadable", "error", f"cannot read the file: {why}", str(path))]
    try:
        source = checked.source(raw, str(path))
    except SpecError as exc:
        return list(exc.diagnostics)
    name = source.data.get("recipe") if isinstance(source.data, dict) else None
    try:
        recipe = recipes.get(name) if isinstance(name, str) else None
    except CorralError:  # said below, in the order the checks have always run
        recipe = None
    parts = (schema_bytes(), raw, canonical(recipe.inputs if recipe is not None else None))
    if recipe is not None and checked.passes("plan", *parts):
        return []
    try:
        doc = check_plan_document(source.data)
        validate_inputs(recipes.get(doc["recipe"]), dict(doc.get("inputs") or {}))
        checked.passed("plan", *parts)
    except SpecError as exc:
        return list(exc.diagnostics)
    except CorralError as exc:
        field = exc.details.get("field")
        pointer = "/" + field.replace(".", "/") if isinstance(field, str) and field != "plan" else ""
        return [source.diagnostic(exc.code, exc.message, pointer)]
    return []


def machines(library: Library) -> list[MachineSummary]:
    """Every machine the library can find, built-ins first."""
    out = []
    builtin_paths = set(library.builtin_paths())
    for path in library.builtin_paths() + library.local_paths():
        try:
            spec = library.load(path)
        except SpecError as exc:  # one broken local file must not hide the others
            out.append(MachineSummary(path.stem, None, "", str(path), path in builtin_paths, 0, 0, exc.message))
            continue
        out.append(
            MachineSummary(
                spec.name,
                spec.version,
                spec.description,
                spec.path,
                path in builtin_paths,
                len(spec.states),
                len(spec.transitions),
            )
        )
    return out


class Definitions:
    """:func:`validate` and :func:`machines` over the service's library."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def validate(self, inp: ValidateInput) -> list[Report]:
        """Validate definition files (default: every built-in and local machine); never raises for them."""
        return validate(self.core.library, inp)

    def machines(self) -> list[MachineSummary]:
        """Every machine the library can find, built-ins first."""
        return machines(self.core.library)


def recipe_rows() -> list[dict[str, Any]]:
    """Every valid recipe on the search path as ``corral recipe list --json`` lists it (resolved: its
    bases applied); see :func:`recipe_listing` for the ones that do not validate."""
    return list(recipe_listing()["recipes"])


def recipe_listing(checked: Any = None) -> dict[str, Any]:
    """``recipes``: every recipe on the search path that validates (:func:`recipe_rows`' rows);
    ``invalid``: each one that does not, ``{recipe, path, diagnostics}``, so one broken local file
    never hides the others. ``checked``: parses and schema verdicts from the content cache
    (:attr:`runner.definitions.library.Library.checked`)."""
    from runner.definitions.recipes import RecipeLibrary
    from runner.errors import SpecError

    library = RecipeLibrary(checked=checked)
    rows: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    paths = library.paths()
    for name in library.names():
        try:
            resolved = library.get(name)
        except SpecError as exc:
            invalid.append(
                {
                    "recipe": name,
                    "path": str(paths.get(name, "")),
                    "diagnostics": [d.to_dict() for d in exc.diagnostics],
                }
            )
            continue
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
    return {"recipes": rows, "invalid": invalid}


def recipe_document(name: str, resolved: bool, checked: Any = None) -> dict[str, Any]:
    """One recipe: as it runs (``resolved``), or as written (its file's path and text). ``checked``:
    as :func:`recipe_listing`'s."""
    from runner.definitions.recipes import RecipeLibrary

    library = RecipeLibrary(checked=checked)
    recipe = library.get(name)  # validated, with its bases
    if resolved:
        return dict(recipe.to_json())
    path = library.paths()[name]
    return {"recipe": name, "path": str(path), "text": path.read_text(encoding="utf-8")}


def draw(
    service: Any,
    library: Library,
    *,
    machine: str | None = None,
    instance_id: str | None = None,
    recipe_name: str | None = None,
    plan_id: str | None = None,
    fmt: str = "mermaid",
    trace: Any = None,
) -> tuple[dict[str, Any], str | bytes, str]:
    """A drawing of one machine (with ``instance_id``: the path it took), recipe or plan.

    Returns the JSON document ``corral draw --json`` prints without the picture, the picture, and a
    phrase naming what was drawn. Exactly one of ``machine``, ``recipe_name`` and ``plan_id`` is given
    (the caller checks it, with its own words for the options). ``trace``: a counterexample document
    of ``corral check`` to highlight on the machine.
    """
    from runner.presentation import draw as drawing

    doc: dict[str, Any]
    if machine is not None:
        spec = _machine_or_plan(library, machine)
        path = None
        if instance_id is not None:
            instance, history = service.events.history(instance_id)
            path = drawing.trail(spec, instance_id, instance, history)
        elif trace is not None:
            path = drawing.trace_trail(spec, trace)
        picture = drawing.render(spec, fmt, path)
        doc = {"machine": spec.name}
        what = f"machine {spec.name} v{spec.version}"
        if path is not None:
            doc |= {"instance": path.instance_id, "state": path.current, "path": path.path}
            what += f", instance {path.instance_id} in {path.current}"
    else:
        from runner.definitions.recipes import RecipeLibrary

        recipes = RecipeLibrary(checked=library.checked)
        status = None
        if plan_id is not None:
            plan = service.plans.plan(plan_id)
            recipe = recipes.get(str(plan.data["recipe"]))
            changed = recipe.sha256 != plan.data.get("recipe_sha256")
            status = drawing.PlanStatus.of(plan, "the recipe changed since the plan was submitted" if changed else "")
        else:
            assert recipe_name is not None
            recipe = recipes.get(recipe_name)
        picture = drawing.render_recipe(recipe, fmt, status)
        doc = {"recipe": recipe.name}
        what = f"recipe {recipe.name} v{recipe.version}"
        if status is not None:
            doc |= {
                "plan": status.plan_id,
                "state": status.state,
                "steps": {s.id: status.of_step(s.id) for s in recipe.steps},
            }
            what = f"plan {status.plan_id} ({status.state}), " + what
    doc["format"] = fmt
    return doc, picture, what


def _machine_or_plan(library: Library, name: str) -> Any:
    """Machine ``name``, or for ``plan@RECIPE`` the recipe's own plan that ``corral check`` explores."""
    plan, at, recipe = name.partition("@")
    if not at or plan != "plan":
        return library.get(name)
    from runner.definitions.recipes import RecipeLibrary
    from runner.proof.recipe import plan_of

    return plan_of(
        library.get("plan"), recipe, [s.id for s in RecipeLibrary(checked=library.checked).get(recipe).steps]
    )


def check(library: Library, names: tuple[str, ...], options: Any) -> dict[str, Any]:
    """Model-check machines and recipes by name (or machine files by path); none: every one known.

    A recipe is checked as its plan (the plan machine with the recipe's steps as triggers of their
    own, :func:`runner.proof.recipe.plan_of`), the plan machine and every machine its steps' operations
    drive; a step whose operation drives no machine (a read, a plugin's) is listed as ``unmodelled``. Each
    machine is explored once however many recipes use it. Raises NotFoundError (``check_unknown``)
    for a name that is neither a machine nor a recipe.
    """
    from runner.definitions.operations import find
    from runner.definitions.recipes import RecipeLibrary
    from runner.errors import NotFoundError
    from runner.proof import check_machine, result_document

    recipes = RecipeLibrary(checked=library.checked)
    machine_names = sorted({p.stem for p in library.builtin_paths() + library.local_paths()})
    wanted_machines: list[Any] = []  # names or paths, in order
    wanted_recipes: list[str] = []
    for name in names or (*machine_names, *recipes.names()):
        path = Path(name)
        if path.suffix in (".yaml", ".yml") or "/" in name:
            if not path.is_file():
                raise NotFoundError(f"no machine file {name}", code="check_unknown", name=name)
            wanted_machines.append(path)
        elif name in machine_names:
            wanted_machines.append(name)
        elif name in recipes.names():
            wanted_recipes.append(name)
        elif name.startswith("plan@") and name[len("plan@") :] in recipes.names():
            wanted_recipes.append(name[len("plan@") :])
        else:
            known = ", ".join([*machine_names, *recipes.names()])
            raise NotFoundError(
                f"no machine or recipe named {name!r} (known: {known})", code="check_unknown", name=name
            )
    recipe_docs: list[dict[str, Any]] = []
    for name in wanted_recipes:
        recipe = recipes.get(name)
        driven = ["plan"]
        unmodelled = []  # steps whose operation drives no machine: to the plan, free choices
        for step in recipe.steps:
            op = find(step.do)
            if op is not None and op.machine:
                driven.append(op.machine)
            else:
                unmodelled.append(step.id)
        driven = list(dict.fromkeys(driven))
        wanted_machines += [m for m in driven if m not in wanted_machines]
        recipe_docs.append({"recipe": name, "path": recipe.path, "machines": driven, "unmodelled": unmodelled})
    docs: dict[str, dict[str, Any]] = {}
    for wanted in wanted_machines:
        spec = library.load(wanted) if isinstance(wanted, Path) else library.get(wanted)
        key = str(wanted)
        if key not in docs:
            docs[key] = result_document(check_machine(spec, options), spec)
    if recipe_docs:
        from runner.proof.recipe import plan_of

        plan = library.get("plan")
        for doc in recipe_docs:
            unrolled = plan_of(plan, doc["recipe"], [s.id for s in recipes.get(doc["recipe"]).steps])
            docs[unrolled.name] = result_document(check_machine(unrolled, options), unrolled)
            doc["machines"].insert(0, unrolled.name)
    by_name = {d["machine"]: d for d in docs.values()}
    for doc in recipe_docs:
        doc["ok"] = all(by_name[m]["ok"] for m in doc["machines"] if m in by_name)
    machines = list(docs.values())
    violated = any(m["violations"] for m in machines)
    stopped = any(m["stopped"] for m in machines)
    return {
        "ok": all(m["ok"] for m in machines),
        "code": "invariant_violated" if violated else "check_incomplete" if stopped else None,
        "violated": violated,
        "stopped": stopped,
        "machines": machines,
        "recipes": recipe_docs,
        "states": sum(m["states"] for m in machines),
        "transitions": sum(m["transitions"] for m in machines),
        "seconds": round(sum(m["seconds"] for m in machines), 3),
    }

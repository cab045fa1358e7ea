"""Recipes: reusable flows of steps, found on a search path, extended without forking, resolved once.

Search path: the built-ins, then ``./recipes``, then the directories in ``$CORRAL_RECIPES``; a local
recipe may not take a built-in's name. A recipe either lists ``steps`` or ``extends`` another with
``insert_before`` / ``insert_after`` (anchor id → steps), ``replace`` (id → step) and ``remove``
(ids); resolution happens at validation time, so a plan always runs a flat list of steps.

What the schema cannot say is linted, each finding with its file and line (``recipe_*`` codes):
unknown recipes and operations, arguments an operation does not take or misses, ``retry`` on an
operation that is not safe to retry, references to inputs that are not declared or to steps that do
not run earlier, ``catch`` targets that are not later steps, duplicate step ids, extension anchors
that do not exist, and ``extends`` / ``recipe.call`` cycles.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.data import data_dir
from runner.definitions import operations as catalogue
from runner.errors import Diagnostic, InputError, NotFoundError, SpecError

if TYPE_CHECKING:
    from runner.documents.checked import Checked

REFERENCE = re.compile(r"\$\{([^}]*)\}")
REFERENCE_BODY = re.compile(
    r"^(inputs)\.([A-Za-z_][A-Za-z0-9_]*)$|^(steps)\.([a-z][a-z0-9_-]{0,63})\.([A-Za-z0-9_.]+)$"
)
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=", "in", "not_in")


@dataclass(frozen=True)
class Retry:
    max_attempts: int = 3
    interval: float = 1.0
    backoff_rate: float = 2.0


@dataclass(frozen=True)
class Catch:
    errors: tuple[str, ...]
    next: str


@dataclass(frozen=True)
class Step:
    """One resolved step, with the file and line it came from."""

    id: str
    do: str
    args: dict[str, Any] = field(default_factory=dict)
    when: dict[str, Any] | None = None
    timeout: float | None = None
    retry: Retry | None = None
    catch: tuple[Catch, ...] = ()
    final: bool = False
    description: str = ""
    origin: str = ""
    line: int | None = None
    pointer: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "do": self.do}
        if self.description:
            out["description"] = self.description
        if self.args:
            out["with"] = self.args
        if self.when is not None:
            out["when"] = self.when
        if self.timeout is not None:
            out["timeout"] = self.timeout
        if self.retry is not None:
            out["retry"] = {
                "max_attempts": self.retry.max_attempts,
                "interval": self.retry.interval,
                "backoff_rate": self.retry.backoff_rate,
            }
        if self.catch:
            out["catch"] = [{"errors": list(c.errors), "next": c.next} for c in self.catch]
        if self.final:
            out["finally"] = True
        return out


@dataclass(frozen=True)
class Recipe:
    """A resolved recipe: a flat list of steps and the JSON Schema of its inputs."""

    name: str
    version: int
    description: str
    inputs: dict[str, Any]
    steps: tuple[Step, ...]
    path: str
    extends: tuple[str, ...] = ()  # the chain of base recipes, nearest first
    budget: dict[str, Any] = field(default_factory=dict)
    """The default budget of a plan of this recipe (``usd``, ``tokens``, ``turns``); a plan's own wins."""

    def to_json(self) -> dict[str, Any]:
        out = {
            "recipe": self.name,
            "version": self.version,
            "description": self.description,
            "inputs": self.inputs,
            "steps": [s.to_json() for s in self.steps],
        }
        if self.budget:  # only when set: a recipe without one keeps the digest it always had
            out["budget"] = self.budget
        return out

    @property
    def sha256(self) -> str:
        """Identifies the resolved content (a plan records it, so a changed recipe is noticed)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    def step(self, step_id: str) -> Step:
        return next(s for s in self.steps if s.id == step_id)


@dataclass
class _Raw:
    path: Path
    shown: str
    doc: dict[str, Any]
    source: Any  # yamlsource.Source, for positions


class RecipeLibrary:
    """Recipes by name along the search path."""

    def __init__(self, directories: list[Path] | None = None, checked: Checked | None = None) -> None:
        """``checked``: parses and schema verdicts from the content cache (the runtime's library's
        :attr:`~runner.definitions.library.Library.checked`); None checks every file afresh."""
        from runner.documents.checked import Checked

        self.checked = checked if checked is not None else Checked(None)
        builtin = data_dir("recipes")
        local = (
            directories
            if directories is not None
            else [Path("recipes")] + [Path(p) for p in os.environ.get("CORRAL_RECIPES", "").split(os.pathsep) if p]
        )
        self.builtin_dir = builtin
        self.directories = [builtin] + [d for d in local if d.is_dir() and d.resolve() != builtin.resolve()]
        self._raw: dict[str, _Raw] = {}
        self._resolved: dict[str, Recipe] = {}

    def files(self) -> list[Path]:
        return [p for d in self.directories for p in sorted(d.glob("*.yaml"))]

    def paths(self) -> dict[str, Path]:
        """Recipe name → file, the first on the search path winning."""
        found: dict[str, Path] = {}
        for path in self.files():
            found.setdefault(path.stem, path)
        return found

    def names(self) -> list[str]:
        return sorted(self.paths())

    def is_builtin(self, name: str) -> bool:
        path = self.paths().get(name)
        return path is not None and path.parent.resolve() == self.builtin_dir.resolve()

    def _load(self, name: str) -> _Raw:
        if name in self._raw:
            return self._raw[name]
        path = self.paths().get(name)
        if path is None:
            raise NotFoundError(
                f"no recipe named {name!r} (known: {', '.join(self.names()) or 'none'})",
                code="recipe_unknown",
                recipe=name,
            )
        raw = self._parse(path)
        self._raw[name] = raw
        return raw

    def _parse(self, path: Path) -> _Raw:
        from runner.definitions.library import _display
        from runner.documents.checked import schema_bytes

        shown = _display(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise SpecError([Diagnostic("spec_unreadable", "error", f"cannot read the file: {why}", shown)]) from None
        source = self.checked.source(raw, shown)
        if not self.checked.passes("schema:recipe", schema_bytes(), raw):
            from runner.documents import schema  # jsonschema: only for bytes not checked before

            diagnostics = schema.check(source, "recipe")
            if diagnostics:
                raise SpecError(diagnostics)
            self.checked.passed("schema:recipe", schema_bytes(), raw)
        if source.data["recipe"] != path.stem:
            raise SpecError(
                [
                    source.diagnostic(
                        "recipe_name_mismatch", f"recipe {source.data['recipe']!r} is defined in {path.name}", "/recipe"
                    )
                ]
            )
        return _Raw(path, shown, source.data, source)

    def get(self, name: str) -> Recipe:
        """The resolved recipe ``name`` (extensions applied, linted)."""
        if name not in self._resolved:
            recipe = self._resolve(name, ())
            _lint(recipe, self)
            self._resolved[name] = recipe
        return self._resolved[name]

    def _resolve(self, name: str, chain: tuple[str, ...]) -> Recipe:
        raw = self._load(name)
        doc, source = raw.doc, raw.source
        if name in chain:
            cycle = " -> ".join((*chain, name))
            raise SpecError(
                [source.diagnostic("recipe_cycle", f"recipes extend each other in a cycle: {cycle}", "/extends")]
            )
        inputs = _inputs(doc.get("inputs"))
        wrong = _schema_problem(inputs, self.checked)
        if wrong is not None:
            pointer, message = wrong
            raise SpecError(
                [
                    source.diagnostic(
                        "recipe_inputs_invalid", f"the inputs are not a valid JSON Schema: {message}", pointer
                    )
                ]
            )
        if doc.get("additional_inputs") is True:
            inputs["additionalProperties"] = True  # the recipe opts out of refusing unknown inputs
        if "steps" in doc:
            steps = [_step(raw, f"/steps/{i}", s) for i, s in enumerate(doc["steps"])]
            budget = dict(doc.get("budget") or {})
            return Recipe(name, doc["version"], doc["description"], inputs, tuple(steps), raw.shown, budget=budget)
        base_name = doc["extends"]
        try:
            base = self._resolve(base_name, (*chain, name))
        except NotFoundError:
            raise SpecError(
                [source.diagnostic("recipe_unknown", f"{name} extends the unknown recipe {base_name!r}", "/extends")]
            ) from None
        steps = list(base.steps)

        def position(anchor: str, pointer: str) -> int:
            for index, step in enumerate(steps):
                if step.id == anchor:
                    return index
            raise SpecError(
                [
                    source.diagnostic(
                        "recipe_dangling_reference", f"{base.name} has no step {anchor!r} to anchor on", pointer
                    )
                ]
            )

        for i, anchor in enumerate(doc.get("remove") or ()):
            del steps[position(anchor, f"/remove/{i}")]
        for anchor, replacement in (doc.get("replace") or {}).items():
            steps[position(anchor, f"/replace/{anchor}")] = _step(raw, f"/replace/{anchor}", replacement)
        for anchor, new in (doc.get("insert_before") or {}).items():
            index = position(anchor, f"/insert_before/{anchor}")
            steps[index:index] = [_step(raw, f"/insert_before/{anchor}/{i}", s) for i, s in enumerate(new)]
        for anchor, new in (doc.get("insert_after") or {}).items():
            index = position(anchor, f"/insert_after/{anchor}") + 1
            steps[index:index] = [_step(raw, f"/insert_after/{anchor}/{i}", s) for i, s in enumerate(new)]
        merged = _merge_inputs(base.inputs, inputs) if doc.get("inputs") else base.inputs
        budget = {**base.budget, **(doc.get("budget") or {})}
        return Recipe(
            name,
            doc["version"],
            doc["description"],
            merged,
            tuple(steps),
            raw.shown,
            (base.name, *base.extends),
            budget,
        )

    def validate_file(self, path: Path) -> list[Diagnostic]:
        """Every finding about the recipe file ``path`` (for ``corral validate``); never raises for it."""
        try:
            raw = self._parse(path)
        except SpecError as exc:
            return exc.diagnostics
        name = raw.doc["recipe"]
        if self.paths().get(name, path).resolve() != path.resolve():
            shadow = self.paths()[name]
            if shadow.parent.resolve() == self.builtin_dir.resolve():
                return [
                    raw.source.diagnostic(
                        "spec_shadows_builtin", f"recipe {name!r} is a built-in name; extend it instead", "/recipe"
                    )
                ]
        self._raw[name] = raw
        try:
            self.get(name)
        except SpecError as exc:
            return exc.diagnostics
        return []


def _schema_problem(inputs: dict[str, Any], checked: Checked) -> tuple[str, str] | None:
    """Where the recipe's ``inputs`` break the JSON Schema metaschema (a pointer into the recipe file,
    and what is wrong), or None: a typo such as ``type: strin`` is found here, not when a plan runs.
    A passing verdict is kept by content (:mod:`runner.documents.checked`)."""
    from runner.documents.checked import canonical

    if checked.passes("metaschema:inputs", canonical(inputs)):
        return None
    import jsonschema

    from runner.documents.source import pointer_of

    try:
        jsonschema.Draft202012Validator.check_schema(inputs)
    except jsonschema.exceptions.SchemaError as exc:
        best = jsonschema.exceptions.best_match([exc]) if exc.context else exc  # type: ignore[list-item]  # reason: best_match ranks any of its errors
        return "/inputs" + pointer_of(best.absolute_path), best.message
    checked.passed("metaschema:inputs", canonical(inputs))
    return None


def _inputs(raw: Any) -> dict[str, Any]:
    schema = dict(raw or {"type": "object", "properties": {}})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _merge_inputs(base: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
    merged = {**base, **{k: v for k, v in mine.items() if k not in ("properties", "required")}}
    merged["properties"] = {**base.get("properties", {}), **mine.get("properties", {})}
    merged["required"] = sorted({*base.get("required", []), *mine.get("required", [])})
    return merged


def _step(raw: _Raw, pointer: str, doc: dict[str, Any]) -> Step:
    retry = doc.get("retry")
    line, _ = raw.source.locate(pointer)
    return Step(
        id=doc["id"],
        do=doc["do"],
        args=dict(doc.get("with") or {}),
        when=dict(doc["when"]) if doc.get("when") else None,
        timeout=doc.get("timeout"),
        retry=Retry(
            retry.get("max_attempts", 3), float(retry.get("interval", 1)), float(retry.get("backoff_rate", 2.0))
        )
        if retry is not None
        else None,
        catch=tuple(Catch(tuple(c["errors"]), c["next"]) for c in doc.get("catch") or ()),
        final=bool(doc.get("finally")),
        description=doc.get("description", ""),
        origin=raw.shown,
        line=line,
        pointer=pointer,
    )


def references(value: Any) -> list[str]:
    """Every ``${…}`` body inside a value (strings, lists and mappings walked)."""
    if isinstance(value, str):
        return REFERENCE.findall(value)
    if isinstance(value, list):
        return [r for item in value for r in references(item)]
    if isinstance(value, dict):
        return [r for item in value.values() for r in references(item)]
    return []


def _lint(recipe: Recipe, library: RecipeLibrary) -> None:
    found: list[Diagnostic] = []

    def bad(step: Step, code: str, message: str, suffix: str = "") -> None:
        found.append(
            Diagnostic(
                code, "error", f"step {step.id!r}: {message}", step.origin, step.line, pointer=step.pointer + suffix
            )
        )

    ids = [s.id for s in recipe.steps]
    declared = set(recipe.inputs.get("properties", {}))
    seen: set[str] = set()
    for index, step in enumerate(recipe.steps):
        if step.id in seen:
            bad(step, "recipe_duplicate_step", "this id is used by an earlier step too")
        seen.add(step.id)
        operation = catalogue.find(step.do)
        if operation is None:
            bad(
                step,
                "recipe_unknown_operation",
                f"no operation {step.do!r} (known: {', '.join(catalogue.names())})",
                "/do",
            )
            continue
        for name in step.args:
            if name not in operation.param_index:
                bad(step, "recipe_bad_arguments", f"{step.do} takes no argument {name!r}", f"/with/{name}")
        for param in operation.params:
            if param.required and param.name not in step.args:
                bad(step, "recipe_bad_arguments", f"{step.do} needs the argument {param.name!r}", "/with")
        if step.retry is not None and not operation.safe_to_retry:
            bad(step, "recipe_retry_unsafe", f"{step.do} is not safe to retry (it could act twice)", "/retry")
        if step.when is not None and step.when.get("op") not in COMPARISONS:
            bad(step, "recipe_bad_condition", f"unknown comparison {step.when.get('op')!r}", "/when")
        for body in references(step.args) + references(step.when or {}):
            match = REFERENCE_BODY.match(body)
            if match is None:
                bad(step, "recipe_bad_reference", f"${{{body}}} is not ${{inputs.NAME}} or ${{steps.ID.FIELD}}")
            elif match.group(1) == "inputs" and match.group(2) not in declared:
                bad(step, "recipe_dangling_reference", f"${{{body}}} names an undeclared input")
            elif match.group(3) == "steps" and match.group(4) not in ids[:index]:
                where = "a later step" if match.group(4) in ids else "no step"
                bad(
                    step,
                    "recipe_dangling_reference",
                    f"${{{body}}} refers to {where}; only earlier steps' outputs can be used",
                )
        for catch in step.catch:
            if catch.next not in ids[index + 1 :]:
                bad(
                    step,
                    "recipe_dangling_reference",
                    f"catch goes to {catch.next!r}, which is not a later step",
                    "/catch",
                )
        if step.do == "recipe.call":
            target = step.args.get("recipe")
            if isinstance(target, str) and not references(target):
                try:
                    _check_call(target, library, (recipe.name,))
                except SpecError as exc:
                    bad(step, exc.code, exc.message, "/with/recipe")
    if found:
        raise SpecError(found)


def _check_call(name: str, library: RecipeLibrary, chain: tuple[str, ...]) -> None:
    if name in chain:
        raise SpecError(
            [
                Diagnostic(
                    "recipe_cycle", "error", "recipes call each other in a cycle: " + " -> ".join((*chain, name)), name
                )
            ]
        )
    try:
        called = library._resolve(name, ())
    except NotFoundError:
        raise SpecError([Diagnostic("recipe_unknown", "error", f"no recipe named {name!r}", name)]) from None
    for step in called.steps:
        target = step.args.get("recipe")
        if step.do == "recipe.call" and isinstance(target, str) and not references(target):
            _check_call(target, library, (*chain, name))


def validate_inputs(recipe: Recipe, given: dict[str, Any]) -> dict[str, Any]:
    """The plan's inputs checked against the recipe's schema, with top-level defaults filled in.

    Raises:
        InputError: ``inputs_invalid`` naming the input and what is wrong.
    """
    import jsonschema

    from runner.documents import schema

    values = dict(given)
    for name, prop in recipe.inputs.get("properties", {}).items():
        if name not in values and isinstance(prop, dict) and "default" in prop:
            values[name] = prop["default"]
    # An unknown input is a typo (``timout: 5``) until the recipe says otherwise (additional_inputs: true):
    # ignoring it would run the plan with the default the author meant to change.
    declared = recipe.inputs.get("properties", {})
    if recipe.inputs.get("additionalProperties", False) is False:
        unknown = sorted(set(values) - set(declared))
        if unknown:
            raise InputError(
                f"inputs.{unknown[0]}",
                f"recipe {recipe.name!r} has no input {unknown[0]!r}"
                + (f" (it takes: {', '.join(sorted(declared))})" if declared else ""),
                code="inputs_invalid",
                unknown=unknown,
            )
    try:
        validator = jsonschema.Draft202012Validator(recipe.inputs)
        schema.refuse_invalid(validator, values, "inputs_invalid", "inputs", "inputs.")
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.UnknownType) as exc:
        # Linting refuses such a schema (``recipe_inputs_invalid``); a recipe built in code may still carry one.
        what = getattr(exc, "message", None) or str(exc).strip().splitlines()[0]
        raise InputError(
            "inputs", f"recipe {recipe.name!r} has an invalid inputs schema: {what}", code="recipe_inputs_invalid"
        ) from None
    return values

"""Finding, validating and caching machine definitions.

A definition is validated (YAML, JSON Schema, lint) once per content: the validated spec is cached
as JSON under ``$CORRAL_HOME/cache/specs/`` keyed by the SHA-256 of corral's version, the schema and
the file's bytes. A transition then costs a file read and a hash instead of a YAML parse and a
schema validation (and jsonschema's import is skipped entirely). An entry is used only if its body
matches its recorded digest and the source digest it records is the file's; otherwise the file is
validated afresh and the entry overwritten (counted in the cache's ledger: ``corral status``).

Built-in machines (those shipped with corral) are the only ones the runner executes for its own
lifecycles; local machines (``./machines``, ``$CORRAL_MACHINES``) are validated and drawn, and may
not reuse a built-in's name.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.cache import ContentCache, key_for, rebuilds
from runner.data import data_dir
from runner.definitions.model import MachineSpec
from runner.definitions.table import TransitionTable
from runner.errors import Diagnostic, NotFoundError, SpecError
from runner.log import get_logger

if TYPE_CHECKING:
    from runner.documents.checked import Checked

logger = get_logger(__name__)  # imports logging only to log (cold start)


@dataclass(frozen=True)
class Report:
    """The outcome of validating one file."""

    path: str
    kind: str
    name: str | None
    diagnostics: list[Diagnostic]

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


def validate_file(path: Path, checked: Checked | None = None) -> tuple[Report, MachineSpec | None]:
    """Parse, schema-check and lint one definition file; never raises for a bad definition.

    With ``checked``, the parse and a passing schema verdict come from the content cache when these
    bytes were seen before (:mod:`runner.documents.checked`); the lint runs every time."""
    from runner.definitions import lint
    from runner.documents.checked import Checked, schema_bytes

    checked = checked if checked is not None else Checked(None)

    shown = _display(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return Report(shown, "unknown", None, [Diagnostic("spec_unreadable", "error", str(exc), shown)]), None
    try:
        source = checked.source(raw, shown)
    except SpecError as exc:
        return Report(shown, "unknown", None, exc.diagnostics), None
    doc = source.data
    kind = _kind_of(doc)
    if kind in ("recipe", "plan"):
        return Report(shown, kind, None, []), None  # validated by runner.definitions.recipes / the plan executor
    if kind != "machine":
        message = "not a corral definition: expected a top-level 'machine', 'recipe' or 'plan' key"
        return Report(shown, kind, None, [source.diagnostic("spec_unknown_kind", message)]), None
    diagnostics = []
    if not checked.passes("schema:machine", schema_bytes(), raw):
        from runner.documents import schema  # jsonschema: only for bytes not checked before

        diagnostics = schema.check(source, "machine")
        if not diagnostics:
            checked.passed("schema:machine", schema_bytes(), raw)
    name = doc.get("machine") if isinstance(doc.get("machine"), str) else None
    if diagnostics:
        return Report(shown, kind, name, diagnostics), None
    diagnostics = lint.lint(source)
    report = Report(shown, kind, name, diagnostics)
    if not report.ok:
        return report, None
    return report, MachineSpec.from_document(doc, shown, hashlib.sha256(raw).hexdigest())


def _kind_of(doc: Any) -> str:
    if isinstance(doc, dict):
        for kind in ("machine", "plan", "recipe"):  # a plan names its recipe: look for "plan" first
            if kind in doc:
                return kind
    return "unknown"


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@dataclass
class Library:
    """Machine definitions by name, validated once per content and cached."""

    cache_dir: Path | None = None
    local_dirs: list[Path] = field(default_factory=list)
    _specs: dict[str, MachineSpec] = field(default_factory=dict)
    _cache: ContentCache = field(init=False)
    _builtins: dict[str, MachineSpec] = field(default_factory=dict)
    _tables: dict[str, TransitionTable] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._cache = ContentCache(self.cache_dir)

    @cached_property
    def checked(self) -> Checked:
        """Parses and schema verdicts by content, beside the spec cache (``cache/checked``)."""
        from runner.documents.checked import Checked

        return Checked(self.cache_dir.parent / "checked" if self.cache_dir is not None else None)

    @classmethod
    def default(cls, cache_dir: Path | None) -> Library:
        """Built-ins, then ``./machines``, then the directories in ``$CORRAL_MACHINES`` (``:``-separated)."""
        local = [Path("machines")]
        local += [Path(p) for p in os.environ.get("CORRAL_MACHINES", "").split(os.pathsep) if p]
        builtin = data_dir("machines").resolve()
        return cls(cache_dir=cache_dir, local_dirs=[d for d in local if d.is_dir() and d.resolve() != builtin])

    def builtin_paths(self) -> list[Path]:
        return sorted(data_dir("machines").glob("*.yaml"))

    def local_paths(self) -> list[Path]:
        return [p for d in self.local_dirs for p in sorted(d.glob("*.yaml"))]

    def path_of(self, name: str) -> Path:
        """The file defining machine ``name``: built-ins first, then the local directories."""
        for path in self.builtin_paths() + self.local_paths():
            if path.stem == name:
                return path
        known = ", ".join(sorted({p.stem for p in self.builtin_paths() + self.local_paths()}))
        raise NotFoundError(f"no machine named {name!r} (known: {known})", code="machine_unknown", machine=name)

    def builtin(self, name: str) -> MachineSpec:
        """A built-in machine, the only kind the runner executes for corral's own lifecycles.

        Loaded once per library: built-in files change only when corral itself is reinstalled.
        """
        spec = self._builtins.get(name)
        if spec is None:
            path = data_dir("machines") / f"{name}.yaml"
            if not path.is_file():
                raise NotFoundError(f"corral has no built-in machine {name!r}", code="machine_unknown", machine=name)
            spec = self._builtins[name] = self.load(path)
        return spec

    def get(self, name: str) -> MachineSpec:
        """A machine by name, from the built-ins or a local directory."""
        return self.load(self.path_of(name))

    def table(self, spec: MachineSpec) -> TransitionTable:
        """The transition table for ``spec``, built once per process and content."""
        table = self._tables.get(spec.sha256)
        if table is None:
            table = self._tables[spec.sha256] = TransitionTable(spec)
        return table

    def load(self, path: Path) -> MachineSpec:
        """The validated spec in ``path``; raises :class:`SpecError` if it does not validate."""
        try:
            raw = path.read_bytes()
        except OSError as exc:
            shown = _display(path)
            raise SpecError([Diagnostic("spec_unreadable", "error", str(exc), shown)]) from None
        key = key_for(_schema_bytes(), raw)
        spec = self._specs.get(key)
        if spec is not None:
            return spec
        spec = self._read_cache(key, path, hashlib.sha256(raw).hexdigest())
        if spec is None:
            report, spec = validate_file(path, self.checked)
            if spec is None:
                raise SpecError(report.diagnostics)
            self._cache.put(key, {**spec.to_json(), "sha256": spec.sha256})
        self._specs[key] = spec
        return spec

    def _read_cache(self, key: str, path: Path, source_sha256: str) -> MachineSpec | None:
        doc = self._cache.get(key)  # verified against its recorded body digest and key
        if doc is None:
            return None
        if not isinstance(doc, dict) or doc.get("sha256") != source_sha256:
            self._cache.reject(key, f"not recorded for the current {path.name}")
            return None
        try:
            return MachineSpec.from_document(doc, _display(path), source_sha256)
        except (KeyError, TypeError, ValueError) as exc:  # a damaged entry: validate afresh
            self._cache.reject(key, f"not a spec ({type(exc).__name__})")
            return None

    def cache_rebuilds(self) -> dict[str, int]:
        """Cache entries found damaged or tampered and rebuilt, by cache (``specs``, ``config``)."""
        return rebuilds(self.cache_dir.parent if self.cache_dir is not None else None)


@cache
def _schema_bytes() -> bytes:
    return (data_dir("schemas") / "machine.schema.json").read_bytes()

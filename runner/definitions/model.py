"""The in-memory form of a validated machine definition.

Built only from documents that passed the JSON Schema, so construction here trusts shapes and
concerns itself with meaning (expanding ``source: '*'``, normalising references). A spec is plain,
immutable data that serialises to JSON for the spec cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "timestamp": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}


@dataclass(frozen=True)
class Ref:
    """A reference to a registered guard, update or effect, with its ``with`` arguments."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Any) -> Ref:
        if isinstance(raw, str):
            return cls(raw)
        return cls(raw["name"], dict(raw.get("with") or {}))

    def to_json(self) -> Any:
        return {"name": self.name, "with": self.args} if self.args else self.name

    def label(self) -> str:
        """How a drawing shows it: ``fence`` or ``fence(allow_expired=true)``."""
        if not self.args:
            return self.name
        inner = ", ".join(f"{k}={_show(v)}" for k, v in sorted(self.args.items()))
        return f"{self.name}({inner})"


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class StateSpec:
    name: str
    description: str
    terminal: bool = False
    intermediate: bool = False


@dataclass(frozen=True)
class Outcomes:
    """Where the effects of a two-phase transition lead."""

    success: str
    failure: str
    ambiguous: str | None = None  # None: stay in the intermediate state for reconcile


@dataclass(frozen=True)
class TransitionSpec:
    index: int
    trigger: str
    sources: tuple[str, ...]
    dest: str
    description: str = ""
    guards: tuple[Ref, ...] = ()
    updates: tuple[Ref, ...] = ()
    effects: tuple[Ref, ...] = ()
    recheck: tuple[Ref, ...] = ()
    outcomes: Outcomes | None = None
    wildcard: bool = False

    @property
    def two_phase(self) -> bool:
        return bool(self.effects)

    def outcome_edges(self) -> list[tuple[str, str]]:
        """``(outcome, dest)`` for the effects of a two-phase transition, from its intermediate ``dest``;
        an undeclared ``ambiguous`` stays there (for reconcile). The schema ties outcomes to effects."""
        if self.outcomes is None:
            return []
        return [
            ("success", self.outcomes.success),
            ("failure", self.outcomes.failure),
            ("ambiguous", self.outcomes.ambiguous or self.dest),
        ]


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str
    description: str = ""
    nullable: bool = True
    secret: bool = False

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if self.type in ("integer", "number") and isinstance(value, bool):
            return False
        return isinstance(value, FIELD_TYPES[self.type])


INVARIANT_KINDS: tuple[str, ...] = (
    "one_live_holder",
    "fenced",
    "holds",
    "never_decreases",
    "at_most_once",
    "at_most_one",
)
"""The predicate vocabulary of ``invariants:``: each invariant names exactly one (docs/proof.md)."""


@dataclass(frozen=True)
class InvariantSpec:
    """One declared (or built-in) predicate ``corral check`` proves: plain data, never code.

    ``kind`` is one of :data:`INVARIANT_KINDS`; ``triggers`` serve ``fenced`` and ``at_most_once``,
    ``states`` serve ``holds`` and ``at_most_one``, ``field`` serves ``holds`` and ``never_decreases``.
    """

    name: str
    description: str
    kind: str
    triggers: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    field: str | None = None
    is_true: bool = False
    builtin: bool = False

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> InvariantSpec:
        kind = next(k for k in INVARIANT_KINDS if k in raw)
        value = raw[kind]
        name, description = raw["name"], raw["description"]
        if kind == "fenced":
            return cls(name, description, kind, triggers=tuple(value))
        if kind == "at_most_once":
            return cls(name, description, kind, triggers=(value,))
        if kind == "at_most_one":
            return cls(name, description, kind, states=tuple(value))
        if kind == "holds":
            return cls(
                name, description, kind, states=tuple(value["states"]), field=value["field"],
                is_true=value.get("is") == "true",
            )  # fmt: skip
        if kind == "never_decreases":
            return cls(name, description, kind, field=value)
        return cls(name, description, kind)

    def to_json(self) -> dict[str, Any]:
        value: Any = True
        if self.kind == "fenced":
            value = list(self.triggers)
        elif self.kind == "at_most_once":
            value = self.triggers[0]
        elif self.kind == "at_most_one":
            value = list(self.states)
        elif self.kind == "holds":
            value = {"states": list(self.states), "field": self.field, "is": "true" if self.is_true else "set"}
        elif self.kind == "never_decreases":
            value = self.field
        return {"name": self.name, "description": self.description, self.kind: value}


@dataclass(frozen=True)
class MachineSpec:
    """A machine definition that passed schema validation and lint."""

    name: str
    version: int
    description: str
    initial: str
    states: dict[str, StateSpec]
    transitions: tuple[TransitionSpec, ...]
    fields: dict[str, FieldSpec]
    path: str
    sha256: str
    invariants: tuple[InvariantSpec, ...] = ()

    def transitions_for(self, trigger: str, state: str) -> list[TransitionSpec]:
        """The candidate transitions for ``trigger`` from ``state``, in definition order."""
        return [t for t in self.transitions if t.trigger == trigger and state in t.sources]

    def triggers(self) -> list[str]:
        return sorted({t.trigger for t in self.transitions})

    @cached_property
    def secret_field_names(self) -> frozenset[str]:
        """Fields declared ``secret``: never listed, never in the event log."""
        return frozenset(name for name, f in self.fields.items() if f.secret)

    @cached_property
    def required_field_names(self) -> tuple[str, ...]:
        """Fields declared non-nullable: every write must leave them set."""
        return tuple(name for name, f in self.fields.items() if not f.nullable)

    def public_data(self, data: dict[str, Any] | Any) -> dict[str, Any]:
        """``data`` without the fields declared secret: what listings and events may show."""
        hidden = self.secret_field_names
        return {k: v for k, v in dict(data).items() if k not in hidden}

    # --- serialisation for the spec cache -------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.name,
            "version": self.version,
            "description": self.description,
            "initial": self.initial,
            "states": {
                n: {"description": s.description, "terminal": s.terminal, "intermediate": s.intermediate}
                for n, s in self.states.items()
            },
            "transitions": [_transition_json(t) for t in self.transitions],
            "data": {
                n: {"type": f.type, "description": f.description, "nullable": f.nullable, "secret": f.secret}
                for n, f in self.fields.items()
            },
            **({"invariants": [i.to_json() for i in self.invariants]} if self.invariants else {}),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any], path: str, sha256: str) -> MachineSpec:
        """Build from a schema-valid document (a YAML file, or :meth:`to_json` output)."""
        states = {
            name: StateSpec(name, raw["description"], bool(raw.get("terminal")), bool(raw.get("intermediate")))
            for name, raw in doc["states"].items()
        }
        not_terminal = tuple(name for name, s in states.items() if not s.terminal)
        transitions = []
        for index, raw in enumerate(doc["transitions"]):
            source = raw["source"]
            wildcard = source == "*"
            sources = not_terminal if wildcard else (source,) if isinstance(source, str) else tuple(source)
            outcomes = raw.get("outcomes")
            transitions.append(
                TransitionSpec(
                    index=index,
                    trigger=raw["trigger"],
                    sources=sources,
                    dest=raw["dest"],
                    description=raw.get("description", ""),
                    guards=tuple(Ref.parse(r) for r in raw.get("guards") or ()),
                    updates=tuple(Ref.parse(r) for r in raw.get("updates") or ()),
                    effects=tuple(Ref.parse(r) for r in raw.get("effects") or ()),
                    recheck=tuple(Ref.parse(r) for r in raw.get("recheck") or ()),
                    outcomes=Outcomes(outcomes["success"], outcomes["failure"], outcomes.get("ambiguous"))
                    if outcomes
                    else None,
                    wildcard=wildcard,
                )
            )
        fields = {
            name: FieldSpec(
                name, raw["type"], raw.get("description", ""), raw.get("nullable", True), raw.get("secret", False)
            )
            for name, raw in (doc.get("data") or {}).items()
        }
        return cls(
            name=doc["machine"],
            version=doc["version"],
            description=doc["description"],
            initial=doc["initial"],
            states=states,
            transitions=tuple(transitions),
            fields=fields,
            path=path,
            sha256=sha256,
            invariants=tuple(InvariantSpec.parse(raw) for raw in doc.get("invariants") or ()),
        )


def _transition_json(t: TransitionSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "trigger": t.trigger,
        "source": "*" if t.wildcard else list(t.sources),
        "dest": t.dest,
    }
    if t.description:
        out["description"] = t.description
    for key in ("guards", "updates", "effects", "recheck"):
        refs: tuple[Ref, ...] = getattr(t, key)
        if refs:
            out[key] = [r.to_json() for r in refs]
    if t.outcomes:
        out["outcomes"] = {"success": t.outcomes.success, "failure": t.outcomes.failure}
        if t.outcomes.ambiguous:
            out["outcomes"]["ambiguous"] = t.outcomes.ambiguous
    return out

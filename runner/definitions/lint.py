"""What a JSON Schema cannot say about a machine: names that resolve, states that connect.

Runs on a schema-valid document. Every finding is a :class:`~runner.errors.Diagnostic` with a
stable code; errors make the definition unusable, warnings do not.

=============================  ========  =========================================================
code                           severity  meaning
=============================  ========  =========================================================
spec_unknown_state             error     initial, a source, a dest or an outcome names no state
spec_initial_terminal          error     the initial state is terminal: nothing could ever happen
spec_terminal_exit             error     a transition leaves a terminal state
spec_unreachable_state         error     no path of transitions leads from initial to the state
spec_unknown_guard             error     a guard (or recheck) name is not registered
spec_unknown_update            error     an update name is not registered
spec_unknown_effect            error     an effect name is not registered
spec_bad_arguments             error     ``with`` arguments the guard/update/effect does not take
spec_ambiguous_transition      error     two transitions for one trigger and source that cannot be
                                         told apart (the later one could never fire)
spec_effect_dest               error     a transition with effects does not enter an intermediate state
spec_invariant_state           error     an invariant names no state of the machine
spec_invariant_field           error     an invariant names no data field, or one of the wrong type
spec_invariant_trigger         error     an invariant names no trigger (``at_most_once``: none with effects)
spec_invariant_duplicate       error     two invariants share a name
spec_intermediate_entry        warning   an intermediate state entered by a transition without effects
spec_dead_end                  warning   a state that is not terminal but has no way out
spec_schema_comment            warning   the file does not start with the yaml-language-server line
spec_name_mismatch             warning   the machine's name differs from its file name
=============================  ========  =========================================================
"""

from __future__ import annotations

import inspect
from collections import deque
from pathlib import Path
from typing import Any

from runner.documents.source import SCHEMA_COMMENT, Source
from runner.effects import EFFECTS
from runner.errors import Diagnostic
from runner.guards import GUARDS
from runner.registry import Registry
from runner.updates import UPDATES


def lint(source: Source) -> list[Diagnostic]:
    """Every finding about the schema-valid machine document in ``source``."""
    doc: dict[str, Any] = source.data
    out: list[Diagnostic] = []
    states: dict[str, dict[str, Any]] = doc["states"]
    terminal = {name for name, s in states.items() if s.get("terminal")}
    intermediate = {name for name, s in states.items() if s.get("intermediate")}

    if not source.text.startswith(SCHEMA_COMMENT):
        out.append(
            source.diagnostic(
                "spec_schema_comment",
                f"the first line should be '{SCHEMA_COMMENT}<path to machine.schema.json>' "
                "so editors validate the file",
                severity="warning",
            )
        )
    stem = Path(source.path).stem
    if stem != doc["machine"]:
        out.append(
            source.diagnostic(
                "spec_name_mismatch",
                f"machine {doc['machine']!r} is defined in a file named {stem!r}",
                "/machine",
                "warning",
            )
        )

    def known(name: str, pointer: str) -> bool:
        if name in states:
            return True
        out.append(source.diagnostic("spec_unknown_state", f"no state named {name!r}", pointer))
        return False

    if known(doc["initial"], "/initial") and doc["initial"] in terminal:
        out.append(
            source.diagnostic("spec_initial_terminal", f"the initial state {doc['initial']!r} is terminal", "/initial")
        )

    edges: dict[str, set[str]] = {name: set() for name in states}
    seen: list[tuple[int, str, set[str], frozenset[Any]]] = []
    for index, t in enumerate(doc["transitions"]):
        at = f"/transitions/{index}"
        raw_source = t["source"]
        if raw_source == "*":
            sources = [n for n in states if n not in terminal]
        else:
            listed = [raw_source] if isinstance(raw_source, str) else list(raw_source)
            sources = []
            for i, name in enumerate(listed):
                pointer = f"{at}/source" if isinstance(raw_source, str) else f"{at}/source/{i}"
                if not known(name, pointer):
                    continue
                if name in terminal:
                    out.append(
                        source.diagnostic(
                            "spec_terminal_exit",
                            f"transition {t['trigger']!r} leaves the terminal state {name!r}",
                            pointer,
                        )
                    )
                sources.append(name)
        outcome_states = [
            state for key, state in (t.get("outcomes") or {}).items() if known(state, f"{at}/outcomes/{key}")
        ]
        if known(t["dest"], f"{at}/dest"):
            for name in sources:
                edges[name].add(t["dest"])
            # The second phase: from the recorded intent to each outcome.
            edges[t["dest"]].update(s for s in outcome_states if s != t["dest"])

        if t.get("effects"):
            if t["dest"] in states and t["dest"] not in intermediate:
                out.append(
                    source.diagnostic(
                        "spec_effect_dest",
                        f"transition {t['trigger']!r} has effects, so its dest {t['dest']!r} must be an "
                        "intermediate state (the recorded intent a crash leaves for reconcile)",
                        f"{at}/dest",
                    )
                )
        elif t["dest"] in intermediate:
            out.append(
                source.diagnostic(
                    "spec_intermediate_entry",
                    f"transition {t['trigger']!r} enters the intermediate state {t['dest']!r} without an effect",
                    f"{at}/dest",
                    "warning",
                )
            )

        for key, registry, code in (
            ("guards", GUARDS, "spec_unknown_guard"),
            ("recheck", GUARDS, "spec_unknown_guard"),
            ("updates", UPDATES, "spec_unknown_update"),
            ("effects", EFFECTS, "spec_unknown_effect"),
        ):
            for i, ref in enumerate(t.get(key) or ()):
                out.extend(_check_ref(source, registry, code, ref, f"{at}/{key}/{i}"))

        guards = frozenset(_ref_key(r) for r in t.get("guards") or ())
        for earlier_index, trigger, earlier_sources, earlier_guards in seen:
            if trigger != t["trigger"]:
                continue
            shared = earlier_sources & set(sources)
            if shared and (not earlier_guards or earlier_guards == guards):
                why = "has no guards" if not earlier_guards else "has the same guards"
                out.append(
                    source.diagnostic(
                        "spec_ambiguous_transition",
                        f"transition {t['trigger']!r} from {sorted(shared)} can never fire: transition "
                        f"#{earlier_index} for the same trigger and source {why}",
                        at,
                    )
                )
        seen.append((index, t["trigger"], set(sources), guards))

    out.extend(_lint_invariants(source, doc))
    if doc["initial"] in states:
        reachable = _reachable(doc["initial"], edges)
        for name in states:
            if name not in reachable:
                out.append(
                    source.diagnostic(
                        "spec_unreachable_state",
                        f"state {name!r} cannot be reached from {doc['initial']!r}",
                        f"/states/{name}",
                    )
                )
    for name in states:
        if name not in terminal and not edges[name]:
            out.append(
                source.diagnostic(
                    "spec_dead_end",
                    f"state {name!r} has no way out but is not marked terminal",
                    f"/states/{name}",
                    "warning",
                )
            )
    return out


def _lint_invariants(source: Source, doc: dict[str, Any]) -> list[Diagnostic]:
    """Every invariant names states, fields and triggers the machine has (the explorer trusts them)."""
    out: list[Diagnostic] = []
    states = doc["states"]
    fields: dict[str, Any] = doc.get("data") or {}
    triggers = {t["trigger"] for t in doc["transitions"]}
    effectful = {t["trigger"] for t in doc["transitions"] if t.get("effects")}
    names: set[str] = set()
    for index, raw in enumerate(doc.get("invariants") or ()):
        at = f"/invariants/{index}"
        if raw["name"] in names:
            out.append(
                source.diagnostic("spec_invariant_duplicate", f"a second invariant named {raw['name']!r}", f"{at}/name")
            )
        names.add(raw["name"])
        label = f"invariant {raw['name']!r}"

        def state(name: str, pointer: str, label: str = label) -> None:
            if name not in states:
                known = ", ".join(states)
                out.append(
                    source.diagnostic(
                        "spec_invariant_state", f"{label} names no state {name!r} (known: {known})", pointer
                    )
                )

        def field(name: str, pointer: str, want: str | None, label: str = label) -> None:
            if name not in fields:
                out.append(source.diagnostic("spec_invariant_field", f"{label} names no data field {name!r}", pointer))
            elif want is not None and fields[name]["type"] != want:
                out.append(
                    source.diagnostic(
                        "spec_invariant_field",
                        f"{label} needs {name!r} to be of type {want}, not {fields[name]['type']}",
                        pointer,
                    )
                )

        def trigger(name: str, pointer: str, pool: set[str], what: str, label: str = label) -> None:
            if name not in pool:
                known = ", ".join(sorted(pool)) or "none"
                out.append(
                    source.diagnostic(
                        "spec_invariant_trigger", f"{label} names no {what} {name!r} (known: {known})", pointer
                    )
                )

        if "fenced" in raw:
            for i, name in enumerate(raw["fenced"]):
                trigger(name, f"{at}/fenced/{i}", triggers, "trigger")
        elif "at_most_once" in raw:
            trigger(raw["at_most_once"], f"{at}/at_most_once", effectful, "trigger with effects")
        elif "at_most_one" in raw:
            for i, name in enumerate(raw["at_most_one"]):
                state(name, f"{at}/at_most_one/{i}")
        elif "holds" in raw:
            for i, name in enumerate(raw["holds"]["states"]):
                state(name, f"{at}/holds/states/{i}")
            field(raw["holds"]["field"], f"{at}/holds/field", "boolean" if raw["holds"].get("is") == "true" else None)
        elif "never_decreases" in raw:
            field(raw["never_decreases"], f"{at}/never_decreases", "integer")
    return out


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    found = {start}
    queue = deque([start])
    while queue:
        for nxt in edges[queue.popleft()]:
            if nxt not in found:
                found.add(nxt)
                queue.append(nxt)
    return found


def _ref_key(ref: Any) -> Any:
    if isinstance(ref, str):
        return (ref, ())
    return (ref["name"], tuple(sorted((k, repr(v)) for k, v in (ref.get("with") or {}).items())))


def _check_ref(source: Source, registry: Registry[Any], code: str, ref: Any, pointer: str) -> list[Diagnostic]:
    name = ref if isinstance(ref, str) else ref["name"]
    args = {} if isinstance(ref, str) else dict(ref.get("with") or {})
    entry = registry.get(name)
    if entry is None:
        hint = ", ".join(registry.names()) or "none"
        return [source.diagnostic(code, f"no {registry.kind} named {name!r} is registered (known: {hint})", pointer)]
    try:
        inspect.signature(entry.fn).bind(None, **args)
    except TypeError as exc:
        return [
            source.diagnostic(
                "spec_bad_arguments", f"{registry.kind} {name!r} does not take these arguments: {exc}", pointer
            )
        ]
    return []

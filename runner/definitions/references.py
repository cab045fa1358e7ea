"""``${inputs.NAME}`` and ``${steps.ID.FIELD}`` references in step arguments, and ``when`` comparisons.

No code and no expressions: a reference names a value. A string that is exactly one reference is
replaced by the value itself (keeping its type); references inside longer text are replaced by the
value's text. ``FIELD`` may descend into mappings and lists with dots (``results.0.token``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner.definitions.recipes import REFERENCE
from runner.errors import InputError


def _lookup(body: str, inputs: Mapping[str, Any], steps: Mapping[str, Mapping[str, Any]]) -> Any:
    parts = body.split(".")
    if parts[0] == "inputs" and len(parts) == 2:
        if parts[1] not in inputs:
            raise InputError("inputs", f"${{{body}}}: the plan has no input {parts[1]!r}", code="reference_unresolved")
        return inputs[parts[1]]
    if parts[0] == "steps" and len(parts) >= 3:
        if parts[1] not in steps:
            raise InputError(
                "steps",
                f"${{{body}}}: step {parts[1]!r} has not produced outputs",
                code="reference_unresolved",
                step=parts[1],
            )
        value: Any = steps[parts[1]]
        for part in parts[2:]:
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                raise InputError(
                    "steps",
                    f"${{{body}}}: no {part!r} in the outputs of step {parts[1]!r}",
                    code="reference_unresolved",
                    step=parts[1],
                )
        return value
    raise InputError("with", f"${{{body}}} is not a reference", code="reference_unresolved")


def resolve(value: Any, inputs: Mapping[str, Any], steps: Mapping[str, Mapping[str, Any]]) -> Any:
    """``value`` with every reference replaced (mappings and lists walked)."""
    if isinstance(value, str):
        whole = REFERENCE.fullmatch(value)
        if whole:
            return _lookup(whole.group(1), inputs, steps)

        def text(match: Any) -> str:
            found = _lookup(match.group(1), inputs, steps)
            return found if isinstance(found, str) else json.dumps(found)

        return REFERENCE.sub(text, value)
    if isinstance(value, list):
        return [resolve(item, inputs, steps) for item in value]
    if isinstance(value, dict):
        return {key: resolve(item, inputs, steps) for key, item in value.items()}
    return value


def compare(left: Any, op: str, right: Any) -> bool:
    """A ``when`` comparison; ordering compares numbers with numbers and text with text only."""
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op in ("in", "not_in"):
        if not isinstance(right, (list, str, dict)):
            raise InputError("when", f"'{op}' needs a list, a text or a mapping on the right", code="condition_invalid")
        found = left in right
        return found if op == "in" else not found
    comparable = (isinstance(left, (int, float)) and isinstance(right, (int, float))) or (
        isinstance(left, str) and isinstance(right, str)
    )
    if not comparable or isinstance(left, bool) or isinstance(right, bool):
        raise InputError("when", f"cannot order {left!r} and {right!r}", code="condition_invalid")
    results: dict[str, bool] = {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}
    return results[op]

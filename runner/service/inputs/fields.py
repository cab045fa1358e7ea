"""An Input field that a surface fills: its argument name and description, declared once.

The CLI's options, the MCP tools' input schemas and the HTTP routes' parameters are drawn from these
(see :mod:`runner.service.operations`): a field declared with :func:`described` is an argument of
every operation that takes its Input; a field without it is supplied by the server (a credential, a
grant's proposal, an idempotency key) and never offered to a caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar, dataclass_transform

MISSING: Any = dataclasses.MISSING
T = TypeVar("T")


def described(
    arg: str,
    doc: str,
    *,
    default: Any = MISSING,
    schema: Mapping[str, Any] | None = None,
    required: bool | None = None,
    shown_default: Any = None,
    lower: bool = False,
    absolute: bool = False,
    was: str | None = None,
    repr: bool = True,
) -> Any:
    """A field with its surface name ``arg`` (the CLI option's, in snake_case) and its description.

    Args:
        schema: its JSON Schema where its type has no plain JSON shape (an enum, an array of objects).
        required: whether a caller must give it (None: when it has no default).
        shown_default: the default a caller is told (and given), where it differs from the field's.
        lower: hex digits: a caller's upper case is taken as lower case.
        absolute: a path a remote caller must give absolute (a server does not share its directory).
        was: its argument name of the release before (deprecated): an MCP or HTTP caller's argument of
            that name is taken as ``arg`` for one more release (docs/mcp.md, "Deprecated names").
    """
    metadata = {
        "arg": arg,
        "doc": doc,
        "schema": dict(schema) if schema is not None else None,
        "required": required,
        "shown_default": shown_default,
        "lower": lower,
        "absolute": absolute,
        "was": was,
    }
    return dataclasses.field(default=default, repr=repr, metadata=metadata)


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, described))
def input_class(cls: type[T]) -> type[T]:
    """An Input: a frozen dataclass whose fields may be :func:`described` (type checkers are told so)."""
    return dataclasses.dataclass(frozen=True)(cls)


def surface_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` a caller fills, in their order."""
    return [f for f in dataclasses.fields(cls) if "arg" in f.metadata]

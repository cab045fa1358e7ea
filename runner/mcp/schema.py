"""JSON Schemas for the tools, generated from the operations' Input types (and the result shapes).

An input schema is built from the described fields of the operation's Input dataclass (their type
hints, defaults, argument names and descriptions: :func:`runner.service.inputs.fields.described`),
without the fields the server supplies (the credential, a grant's proposal, the idempotency keys).
So a field added to an Input shows up in the tool's schema, and a schema cannot describe an argument
the service does not take.

Every schema here is an ``object`` with ``properties``; none has a top-level ``oneOf``/``anyOf``/
``allOf`` (Claude-backed clients reject them): "exactly one of" is enforced at run time with a clear
error. A value that may be absent is ``{"type": [T, "null"]}``, never an ``anyOf``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.service.inputs.fields import surface_fields

JSONSchema = dict[str, Any]

_SCALARS: dict[Any, JSONSchema] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    Path: {"type": "string"},
}


def type_schema(hint: Any) -> JSONSchema:
    """The JSON Schema of one field's type hint (``str``, ``int | None``, ``tuple[str, ...]``, ...).

    Raises:
        TypeError: a type with no JSON shape here (the tool must give that argument's schema itself).
    """
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1 and len(args) == 2:
            inner = type_schema(present[0])
            if isinstance(inner.get("type"), str):
                inner["type"] = [inner["type"], "null"]
                return inner
        raise TypeError(f"no JSON schema for {hint!r}")
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": type_schema(args[0])}
    if origin in (list, Sequence) and len(args) == 1:
        return {"type": "array", "items": type_schema(args[0])}
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return {"type": "object"}
    raise TypeError(f"no JSON schema for {hint!r}")


@dataclasses.dataclass(frozen=True)
class Arg:
    """A tool argument that is no field of the operation's Input (the tool's handler reads it): its
    description and schema."""

    description: str
    schema: JSONSchema
    required: bool = False
    default: Any = None
    """The default shown in the schema (and filled in before the handler runs)."""


def input_schema(cls: type | None, extras: Mapping[str, Arg], exclude: Sequence[str] = ()) -> JSONSchema:
    """The tool's input schema: one property per described field of ``cls`` (under its argument name,
    typed from its hint), but those in ``exclude``, then one per extra argument.

    Raises:
        TypeError: a field's type has no JSON shape and it gives no schema, or an argument is named twice.
    """
    properties: dict[str, JSONSchema] = {}
    required: list[str] = []
    if cls is not None:
        hints = typing.get_type_hints(cls)
        for f in surface_fields(cls):
            meta = f.metadata
            name = meta["arg"]
            if name in exclude:
                continue
            schema = dict(meta["schema"]) if meta["schema"] is not None else type_schema(hints[f.name])
            schema["description"] = meta["doc"]
            default = meta["shown_default"] if meta["shown_default"] is not None else f.default
            if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            if default is not dataclasses.MISSING and default is not None:
                schema["default"] = list(default) if isinstance(default, tuple) else default
            is_required = meta["required"]
            if is_required is None:
                is_required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if is_required:
                required.append(name)
            properties[name] = schema
    for name, arg in extras.items():
        if name in properties:
            raise TypeError(f"argument {name!r} is a field of {cls!r} already")
        schema = {**arg.schema, "description": arg.description}
        if arg.default is not None:
            schema["default"] = arg.default
        if arg.required:
            required.append(name)
        properties[name] = schema
    out: JSONSchema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


# --- result shapes ----------------------------------------------------------------------------------------
# What each view's ``to_dict`` writes (runner/service/views): the keys it always has, typed, and
# ``additionalProperties`` for the instance data it spreads beside them. Every structured result of the
# MCP conformance run is validated against its tool's output schema (the SDK client does so too).


def obj(
    properties: Mapping[str, JSONSchema], *, open_: bool = True, required: Sequence[str] | None = None
) -> JSONSchema:
    """An object schema with ``properties`` (all required unless ``required`` says which)."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties) if required is None else list(required),
        "additionalProperties": open_,
    }


STR: JSONSchema = {"type": "string"}
INT: JSONSchema = {"type": "integer"}
BOOL: JSONSchema = {"type": "boolean"}
ANY_OBJ: JSONSchema = {"type": "object"}
NULLABLE_STR: JSONSchema = {"type": ["string", "null"]}


def array(items: JSONSchema) -> JSONSchema:
    return {"type": "array", "items": items}


LEASE = obj({"controller_id": STR, "state": STR, "expired": BOOL, "version": INT})
"""``LeaseView.to_dict``: a controller lease (its data beside; never the token)."""
AGENT_LEASE = obj({"id": STR, "machine": STR, "state": STR, "version": INT})
"""``AgentLeaseView.to_dict``: a reviewer, writer, adopted lease or a pane close."""
RECEIPT = obj({"state": STR, "version": INT, "token": STR}, required=["state", "version"])
"""``ReceiptView.to_dict``."""
OBSERVATION = obj({"pane_id": STR, "name": STR, "kind": STR, "status": STR, "seq": INT})
"""``Observation.to_dict``: one agent as its host sees it."""
COLLECTED = obj({"receipt": RECEIPT, "output": STR, "replayed": BOOL})
"""``CollectResult.to_dict``: the output is text an agent printed."""
CLOSED = obj({"lease": AGENT_LEASE, "output": STR})
"""``CloseResult.to_dict``."""
HOUSEKEEPING = obj({"applied": BOOL, "actions": array(ANY_OBJ)})
"""``Housekeeping.to_dict`` (cleanup, reconcile)."""
WINNER = obj({"target": STR, "observation": OBSERVATION, "output": STR})
PLAN_STEP = obj({"id": STR, "state": STR})
"""One step of a plan, in run order: its record (attempt, at, seconds, outputs, error …) or only
``state: pending`` if it has not run."""
PLAN = obj(
    {"plan": STR, "recipe": STR, "state": STR, "controller": NULLABLE_STR, "steps": array(PLAN_STEP)},
    required=["plan", "recipe", "state", "steps"],
)
"""A plan's summary, as ``corral plans show --json`` prints it."""
RUNNER_LEASE = obj(
    {
        "status": {"type": "string", "enum": ["active", "expired", "absent"]},
        "host": NULLABLE_STR,
        "pid": {"type": ["integer", "null"]},
        "expires_at": NULLABLE_STR,
    },
    open_=False,
)
"""``plans show``'s ``runner``: the runner's lease on the plan (``runner.service.plans.runner_lease``)."""
PAGE = {"next_after": NULLABLE_STR}

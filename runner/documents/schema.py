"""JSON Schema validation of definition documents (``schemas/*.schema.json``, draft 2020-12).

jsonschema costs ~0.1 s to import, so it is imported here only, and this module is imported only
when a definition is actually validated (``corral validate``, or a spec-cache miss).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

import jsonschema
import referencing
from referencing.jsonschema import DRAFT202012

from runner.data import data_dir
from runner.documents.yamlsource import Source, pointer_of
from runner.errors import Diagnostic, InputError


@cache
def _registry() -> referencing.Registry[Any]:
    resources = []
    for path in sorted(data_dir("schemas").glob("*.schema.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resource = referencing.Resource.from_contents(contents, default_specification=DRAFT202012)
        resources.append((contents["$id"], resource))
        resources.append((path.name, resource))  # so documents may $ref a sibling by file name
    return referencing.Registry().with_resources(resources)


@cache
def validator(kind: str) -> jsonschema.protocols.Validator:
    """The validator for ``machine`` (or, later, ``recipe``/``plan``) documents."""
    schema = _registry().contents(f"{kind}.schema.json")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=_registry())


def refuse_invalid(validator: Any, doc: Any, code: str, root: str, prefix: str = "") -> None:
    """Raise :class:`InputError` ``code`` for the first violation (in path order), naming its field as
    ``prefix`` + the dotted path (``root`` for the document itself), with every violation in ``problems``."""
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        first = errors[0]
        path = ".".join(map(str, first.absolute_path))
        field = f"{prefix}{path}" if path else root
        raise InputError(field, first.message, code=code, problems=[e.message for e in errors])


def check(source: Source, kind: str) -> list[Diagnostic]:
    """Every schema violation in ``source``, each positioned at the offending value."""
    diagnostics = []
    errors = sorted(
        validator(kind).iter_errors(source.data), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    for error in errors:
        best = jsonschema.exceptions.best_match([error]) if error.context else error
        pointer = pointer_of(best.absolute_path)
        diagnostics.append(source.diagnostic("spec_invalid", _message(best), pointer))
    return diagnostics


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        return error.message.replace("Additional properties are not allowed", "unknown key(s)")
    words = error.schema.get("x-message") if isinstance(error.schema, Mapping) else None
    if error.validator == "pattern" and isinstance(words, str):
        return f"{error.instance!r} {words}"  # the schema's own words for its pattern
    if error.validator == "pattern":
        return f"{error.instance!r} does not match {error.validator_value!r}"
    return error.message

"""Strict JSON text: the values every corral reader (the store, the caches, ``--json``) can hold.

Python's ``json`` module accepts ``NaN`` and ``Infinity``, lets a repeated key silently overwrite the
first, raises ``RecursionError`` (not ``ValueError``) on deep nesting, and converts integers of any
length until Python's 4,300-digit limit raises. Every file corral reads as JSON goes through
:func:`loads`, which refuses all of these with :class:`JSONValueError` (a ``ValueError``, so existing
``except ValueError`` handlers keep catching it). The same bounds apply to YAML definitions
(:mod:`runner.documents.yamlsource`). Imports only the standard library: the credential reader on the hot
path of ``corral controller renew`` uses it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 100  # definitions nest a dozen levels; the JSON Schema validator recurses per level
MAX_INT = 2**63 - 1  # SQLite's integers, and what every JSON consumer of the store can hold
MAX_INT_LITERAL = 100  # characters: longer integer text is out of range before it is converted
SURROGATE = re.compile("[\ud800-\udfff]")  # a lone half of a UTF-16 pair: not Unicode text


class JSONValueError(ValueError):
    """The text is not strict JSON corral can hold; the message says which rule it broke."""


def int_out_of_range(value: int) -> bool:
    """True when ``value`` does not fit in a signed 64-bit integer."""
    return not -MAX_INT - 1 <= value <= MAX_INT


def loads(text: str | bytes) -> Any:
    """Parse strict JSON text.

    Raises:
        JSONValueError: malformed JSON, ``NaN``/``Infinity`` (or a number that overflows to it), an
            integer outside 64 bits, a key repeated in one object, nesting deeper than
            :data:`MAX_DEPTH`, a ``\\ud800`` escape that leaves half a character.
    """
    try:
        value = json.loads(
            text,
            parse_constant=_constant,
            parse_int=_integer,
            parse_float=_float,
            object_pairs_hook=_object,
        )
    except RecursionError:
        raise JSONValueError(f"values nest deeper than {MAX_DEPTH} levels") from None
    except JSONValueError:
        raise
    except ValueError as exc:  # json.JSONDecodeError, or undecodable bytes
        raise JSONValueError(f"malformed JSON: {exc}") from None
    _check_depth(value)
    return value


def _constant(name: str) -> Any:
    raise JSONValueError(f"{name} is not a JSON number")


def _integer(text: str) -> int:
    if len(text) > MAX_INT_LITERAL or int_out_of_range(value := int(text)):
        raise JSONValueError("integer out of range: corral keeps 64-bit integers (-2**63 to 2**63-1)")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONValueError(f"{text[:40]} is too large for a JSON number")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JSONValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _check_depth(value: Any) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` and lone surrogates (iteratively: no recursion)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str) and SURROGATE.search(item):
            raise JSONValueError("a string holds a lone UTF-16 surrogate, which is not Unicode text")
        if isinstance(item, dict):
            pending.extend((key, depth) for key in item)
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise JSONValueError(f"values nest deeper than {MAX_DEPTH} levels")
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)

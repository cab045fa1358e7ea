"""Parse a YAML definition into plain data while remembering where every value came from.

PyYAML's safe loader builds Python objects and forgets positions; diagnostics must name a file and a
line. So the document is composed into nodes and converted here, recording the 1-based line and
column of every JSON pointer. Only the safe tag set is accepted (no Python objects, no code), and a
key repeated in one mapping is an error instead of silently overwriting the first.

Every definition and plan becomes JSON (the spec cache, the store, event payloads, ``--json``), so
only JSON values come out of here: strings, 64-bit integers, finite floats, booleans, null, lists and
mappings with string keys. Anything else (a ``!!binary`` blob, an explicit ``!!timestamp``, ``.nan``,
``.inf``, an integer too large for a 64-bit store) is refused with its file and line rather than
crashing whatever reads it later. Unquoted dates stay strings, as in YAML 1.2's core schema.
Nesting is bounded (the walk and the JSON Schema validator are recursive), and bytes that are not
UTF-8 are refused with the position of the first bad byte.
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import yaml

from runner import jsonvalues
from runner.documents.source import SCHEMA_COMMENT, Source, decode, escape, pointer_of
from runner.errors import Diagnostic, SpecError

__all__ = ["SCHEMA_COMMENT", "Source", "decode", "escape", "load", "parse", "pointer_of"]

try:  # libyaml is several times faster; the pure loader is a correct fallback.
    _Base: type[Any] = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Base = yaml.SafeLoader


# YAML 1.1 resolves these implicitly; YAML 1.2's core schema (and JSON) does not: ``on``/``yes`` are
# re-added below as strings, ``2026-01-01`` stays a string, ``=`` is a plain string.
_DROPPED_RESOLVERS = frozenset({"tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"})


class _Loader(_Base):  # type: ignore[misc]  # a base chosen at import time
    """The safe loader with YAML 1.2 booleans (only true/false) and no implicit timestamps.

    YAML 1.1 also reads on/off/yes/no/y/n as booleans, so a state named ``off`` would silently
    become ``False``. Machine authors name states like that; YAML 1.2 agrees with them. Likewise an
    unquoted ``2026-01-01`` would become a ``datetime.date``, which no JSON document can hold: it
    stays the string it looks like.
    """

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, Any]]]] = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED_RESOLVERS]
        for first, resolvers in _Base.yaml_implicit_resolvers.items()
    }


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

MAX_EXPANDED_NODES = 100_000
MAX_DEPTH = jsonvalues.MAX_DEPTH  # lists and mappings; the walk and jsonschema recurse per level
_INT_TAG = "tag:yaml.org,2002:int"
_PLAIN_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


def load(path: Any, shown: str | None = None) -> Source:
    """Read, decode and parse the file ``path`` (shown as ``shown`` in diagnostics).

    Raises:
        SpecError: ``spec_unreadable`` when the file cannot be read, ``spec_encoding`` when it is
            not UTF-8, and everything :func:`parse` raises.
    """
    shown = str(path) if shown is None else shown
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise SpecError([Diagnostic("spec_unreadable", "error", f"cannot read the file: {why}", shown)]) from None
    return parse(decode(raw, shown), shown)


def parse(text: str, path: str) -> Source:
    """Parse ``text`` (the contents of ``path``) into a :class:`Source` of JSON-compatible values.

    Raises:
        SpecError: ``spec_yaml`` for malformed YAML, unsafe tags, non-string keys, an empty file,
            nesting deeper than :data:`MAX_DEPTH`; ``spec_duplicate_key`` for a key repeated within
            one mapping; ``spec_unsupported_value`` for a value JSON cannot hold.
    """
    try:
        return _parse_yaml(text, path)
    except SpecError as exc:
        if exc.code != "spec_yaml" or not text.lstrip("\ufeff \t\r\n").startswith(("{", "[")):
            raise
        # A JSON document that YAML 1.1 cannot read (an escaped character outside the BMP, a tab
        # between tokens): strict JSON it is, positioned at its start only. Otherwise YAML's error.
        try:
            data = jsonvalues.loads(text)
        except jsonvalues.JSONValueError:
            raise exc from None
        return Source(path=path, text=text, data=data, positions={"": (1, 1)})


def _parse_yaml(text: str, path: str) -> Source:
    loader = _Loader(text)
    source = Source(path=path, text=text, data=None)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError([Diagnostic("spec_yaml", "error", "the file holds no YAML document", path, 1, 1)])
        source.data, _, _ = _Walk(loader, source).convert(node, "", 0)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        column = mark.column + 1 if mark else None
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        raise SpecError([Diagnostic("spec_yaml", "error", f"malformed YAML: {problem}", path, line, column)]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Diagnostic("spec_yaml", "error", f"malformed YAML: {exc}", path)]) from None
    finally:
        loader.dispose()
    return source


class _Walk:
    """Converts nodes once each, sizing the document as if every alias were expanded.

    Aliases are shared rather than copied, but a validator walks the expanded tree, so a few
    nested aliases (the "billion laughs") could still cost exponential time: refused by size. Depth
    is judged on the expanded tree too (an alias adds the height of what it names), because a chain
    of aliases can nest deeper than any text does.
    """

    def __init__(self, loader: Any, source: Source) -> None:
        self.loader = loader
        self.source = source
        self.values: dict[int, Any] = {}
        # Invariant: a node has a size and a height once its conversion has finished.
        self.sizes: dict[int, tuple[int, int]] = {}

    def convert(self, node: yaml.Node, pointer: str, depth: int) -> tuple[Any, int, int]:
        """``node`` as plain data, with its expanded size and height; ``depth`` is where it sits."""
        self.source.positions.setdefault(pointer, (node.start_mark.line + 1, node.start_mark.column + 1))
        key = id(node)
        if key in self.values:  # an alias
            if key not in self.sizes:
                raise SpecError([_at(self.source, node, "spec_yaml", "an alias refers to a node that contains it")])
            size, height = self.sizes[key]
            if depth + height > MAX_DEPTH:
                raise SpecError([_at(self.source, node, "spec_yaml", _TOO_DEEP)])
            return self.values[key], size, height
        if depth >= MAX_DEPTH and not isinstance(node, yaml.ScalarNode):
            raise SpecError([_at(self.source, node, "spec_yaml", _TOO_DEEP)])
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _PLAIN_TAGS:
            # Scalars go through the safe constructor, which refuses unknown tags; collections are
            # walked here, so their tags are checked here.
            raise SpecError([_at(self.source, node, "spec_yaml", f"unsupported YAML tag {node.tag!r}")])
        size, height = 1, 0
        value: Any
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)  # resolves merge keys (<<) the way the safe loader does
            value = self.values[key] = {}
            for key_node, value_node in node.value:
                name = self.scalar(key_node, pointer) if isinstance(key_node, yaml.ScalarNode) else key_node.value
                if not isinstance(name, str):
                    kind = "a collection" if isinstance(name, list) else type(name).__name__
                    raise SpecError(
                        [_at(self.source, key_node, "spec_yaml", f"mapping keys must be strings, not {kind}")]
                    )
                if name in value:
                    raise SpecError(
                        [_at(self.source, key_node, "spec_duplicate_key", f"key {name!r} appears twice in one mapping")]
                    )
                value[name], child, tall = self.convert(value_node, f"{pointer}/{escape(name)}", depth + 1)
                size, height = size + child, max(height, tall)
        elif isinstance(node, yaml.SequenceNode):
            value = self.values[key] = []
            for index, item in enumerate(node.value):
                converted, child, tall = self.convert(item, f"{pointer}/{index}", depth + 1)
                value.append(converted)
                size, height = size + child, max(height, tall)
        else:
            value = self.values[key] = self.scalar(node, pointer)
        if not isinstance(node, yaml.ScalarNode):
            height += 1  # a list or mapping is one level of nesting
        if size > MAX_EXPANDED_NODES:
            message = f"the document expands to more than {MAX_EXPANDED_NODES} values (aliases)"
            raise SpecError([_at(self.source, node, "spec_yaml", message)])
        self.sizes[key] = (size, height)
        return value, size, height

    def scalar(self, node: yaml.Node, pointer: str) -> Any:
        """The JSON value of one scalar node, or a :class:`SpecError` at its position.

        PyYAML's constructors raise plain ``ValueError``/``KeyError``/... for an explicit tag on
        text it cannot read (``!!int abc``, ``!!bool maybe``, ``!!timestamp x``) and Python refuses
        to convert integers of more than 4,300 digits: all are refused here, never passed on.
        """
        if node.tag == _INT_TAG and len(node.value) > jsonvalues.MAX_INT_LITERAL:
            raise SpecError([_at(self.source, node, "spec_unsupported_value", _INT_RANGE, pointer)])
        try:
            value = self.loader.construct_object(node, deep=True)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            shown = node.value if len(node.value) <= 40 else node.value[:40] + "..."
            message = f"cannot read {shown!r} as {node.tag.rsplit(':', 1)[-1]} ({type(exc).__name__})"
            raise SpecError([_at(self.source, node, "spec_yaml", message, pointer)]) from None
        problem = _unsupported(value)
        if problem is not None:
            raise SpecError([_at(self.source, node, "spec_unsupported_value", problem, pointer)])
        return value


_TOO_DEEP = f"values nest deeper than {MAX_DEPTH} levels"
_INT_RANGE = "integer out of range: corral keeps 64-bit integers (-2**63 to 2**63-1); quote it to keep it as text"


def _unsupported(value: Any) -> str | None:
    """Why ``value`` (a constructed scalar) cannot be a JSON value, or None when it can."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if jsonvalues.SURROGATE.search(value):
            return "the string holds a lone UTF-16 surrogate, which is not Unicode text"
        return None
    if isinstance(value, int):
        return _INT_RANGE if jsonvalues.int_out_of_range(value) else None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a JSON number: use a finite number"
    kind = type(value).__name__
    hint = "; quote it to keep it as a string" if kind in ("date", "datetime") else ""
    return f"a {kind} value is not JSON (only strings, numbers, booleans, null, lists and mappings){hint}"


def _at(source: Source, node: yaml.Node, code: str, message: str, pointer: str = "") -> Diagnostic:
    line, column = node.start_mark.line + 1, node.start_mark.column + 1
    return Diagnostic(code, "error", message, source.path, line, column, pointer)

"""Parse a YAML definition into plain data while remembering where every value came from.

PyYAML's safe loader builds Python objects and forgets positions; diagnostics must name a file and a
line. So the document is composed into nodes and converted here, recording the 1-based line and
column of every JSON pointer. Only the safe tag set is accepted (no Python objects, no code), and a
key repeated in one mapping is an error instead of silently overwriting the first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

from runner.errors import Diagnostic, SpecError

try:  # libyaml is several times faster; the pure loader is a correct fallback.
    _Base: type[Any] = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Base = yaml.SafeLoader


class _Loader(_Base):  # type: ignore[misc]  # a base chosen at import time
    """The safe loader with YAML 1.2 booleans: only true/false are booleans.

    YAML 1.1 also reads on/off/yes/no/y/n as booleans, so a state named ``off`` would silently
    become ``False``. Machine authors name states like that; YAML 1.2 agrees with them.
    """

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, Any]]]] = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in _Base.yaml_implicit_resolvers.items()
    }


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

SCHEMA_COMMENT = "# yaml-language-server: $schema="
MAX_EXPANDED_NODES = 100_000
_PLAIN_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


@dataclass
class Source:
    """A parsed document, the file it came from, and the position of every value in it."""

    path: str
    text: str
    data: Any
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def locate(self, pointer: str) -> tuple[int | None, int | None]:
        """The line and column of ``pointer``, or of its nearest ancestor that has one."""
        while True:
            if pointer in self.positions:
                return self.positions[pointer]
            if not pointer:
                return None, None
            pointer = pointer.rsplit("/", 1)[0]

    def diagnostic(self, code: str, message: str, pointer: str = "", severity: str = "error") -> Diagnostic:
        """A diagnostic for this file, positioned at ``pointer``."""
        line, column = self.locate(pointer)
        return Diagnostic(code, severity, message, self.path, line, column, pointer)


def escape(token: str) -> str:
    """Escape one JSON pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer_of(parts: Any) -> str:
    """Join path parts (keys and indexes) into a JSON pointer."""
    return "".join("/" + escape(str(p)) for p in parts)


def parse(text: str, path: str) -> Source:
    """Parse ``text`` (the contents of ``path``) into a :class:`Source`.

    Raises:
        SpecError: ``spec_yaml`` for malformed YAML, unsafe tags, non-string keys, an empty file;
            ``spec_duplicate_key`` for a key repeated within one mapping.
    """
    loader = _Loader(text)
    source = Source(path=path, text=text, data=None)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError([Diagnostic("spec_yaml", "error", "the file holds no YAML document", path, 1, 1)])
        source.data, _ = _Walk(loader, source).convert(node, "")
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
    nested aliases (the "billion laughs") could still cost exponential time: refused by size.
    """

    def __init__(self, loader: Any, source: Source) -> None:
        self.loader = loader
        self.source = source
        self.values: dict[int, Any] = {}
        self.sizes: dict[int, int] = {}

    def convert(self, node: yaml.Node, pointer: str) -> tuple[Any, int]:
        self.source.positions.setdefault(pointer, (node.start_mark.line + 1, node.start_mark.column + 1))
        key = id(node)
        if key in self.values:  # an alias
            if key not in self.sizes:
                raise SpecError([_at(self.source, node, "spec_yaml", "an alias refers to a node that contains it")])
            return self.values[key], self.sizes[key]
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _PLAIN_TAGS:
            # Scalars go through the safe constructor, which refuses unknown tags; collections are
            # walked here, so their tags are checked here.
            raise SpecError([_at(self.source, node, "spec_yaml", f"unsupported YAML tag {node.tag!r}")])
        size = 1
        value: Any
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)  # resolves merge keys (<<) the way the safe loader does
            value = self.values[key] = {}
            for key_node, value_node in node.value:
                name = self.loader.construct_object(key_node, deep=True)
                if not isinstance(name, str):
                    kind = type(name).__name__
                    raise SpecError(
                        [_at(self.source, key_node, "spec_yaml", f"mapping keys must be strings, not {kind}")]
                    )
                if name in value:
                    raise SpecError(
                        [_at(self.source, key_node, "spec_duplicate_key", f"key {name!r} appears twice in one mapping")]
                    )
                value[name], child = self.convert(value_node, f"{pointer}/{escape(name)}")
                size += child
        elif isinstance(node, yaml.SequenceNode):
            value = self.values[key] = []
            for index, item in enumerate(node.value):
                converted, child = self.convert(item, f"{pointer}/{index}")
                value.append(converted)
                size += child
        else:
            value = self.values[key] = self.loader.construct_object(node, deep=True)
        if size > MAX_EXPANDED_NODES:
            raise SpecError(
                [
                    _at(
                        self.source,
                        node,
                        "spec_yaml",
                        f"the document expands to more than {MAX_EXPANDED_NODES} values (aliases)",
                    )
                ]
            )
        self.sizes[key] = size
        return value, size


def _at(source: Source, node: yaml.Node, code: str, message: str) -> Diagnostic:
    return Diagnostic(code, "error", message, source.path, node.start_mark.line + 1, node.start_mark.column + 1)

"""Parse a YAML definition into plain data while remembering where every value came from.

PyYAML's safe loader builds Python objects and forgets positions; diagnostics must name a file and a
line. So the document is composed into nodes and converted here, recording the 1-based line and
column of every JSON pointer. Only the safe tag set is accepted (no Python objects, no code), and a
key repeated in one mapping is an error instead of silently overwriting the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from runner.errors import Diagnostic, SpecError

try:  # libyaml is several times faster; the pure loader is a correct fallback.
    _Loader: type[Any] = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader  # pragma: no cover

SCHEMA_COMMENT = "# yaml-language-server: $schema="


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
        source.data = _convert(loader, node, "", source, {})
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


def _convert(loader: Any, node: yaml.Node, pointer: str, source: Source, memo: dict[int, Any]) -> Any:
    source.positions.setdefault(pointer, (node.start_mark.line + 1, node.start_mark.column + 1))
    if id(node) in memo:  # an alias: share the object instead of expanding it again
        return memo[id(node)]
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves YAML merge keys (<<) the way the safe loader does
        result: dict[str, Any] = {}
        memo[id(node)] = result
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise SpecError(
                    [_at(source, key_node, "spec_yaml", f"mapping keys must be strings, not {type(key).__name__}")]
                )
            if key in result:
                raise SpecError(
                    [_at(source, key_node, "spec_duplicate_key", f"key {key!r} appears twice in one mapping")]
                )
            child = f"{pointer}/{escape(key)}"
            result[key] = _convert(loader, value_node, child, source, memo)
        return result
    if isinstance(node, yaml.SequenceNode):
        items: list[Any] = []
        memo[id(node)] = items
        for index, item in enumerate(node.value):
            items.append(_convert(loader, item, f"{pointer}/{index}", source, memo))
        return items
    value = loader.construct_object(node, deep=True)
    memo[id(node)] = value
    return value


def _at(source: Source, node: yaml.Node, code: str, message: str) -> Diagnostic:
    return Diagnostic(code, "error", message, source.path, node.start_mark.line + 1, node.start_mark.column + 1)

"""A parsed definition document and where each of its values came from (:class:`Source`), with the
helpers that need no YAML parser: JSON pointers and decoding a file's bytes.

Apart from :mod:`runner.documents.yamlsource` (which parses, and imports PyYAML) so that a document
rebuilt from the content cache (:mod:`runner.documents.checked`), and the lint that reads it, never
import PyYAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.errors import Diagnostic, SpecError

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


def decode(raw: bytes, path: str) -> str:
    """The UTF-8 text of ``raw`` (the bytes of ``path``); a byte order mark is dropped.

    Raises:
        SpecError: ``spec_encoding`` naming the first byte that is not UTF-8, with its line and
            column, instead of guessing an encoding or replacing the byte.
    """
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        message = f"not UTF-8 at byte {exc.start} (0x{raw[exc.start]:02x}): save the file as UTF-8"
        raise SpecError([Diagnostic("spec_encoding", "error", message, path, line, column)]) from None

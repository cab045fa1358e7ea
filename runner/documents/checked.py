"""Parsed definition documents and their JSON Schema verdicts, kept in the content cache by their bytes.

Parsing YAML and checking it against JSON Schema cost more than anything a listing or a validation
does with the result (PyYAML and jsonschema alone take several times a bare Python start to import),
and both are functions of bytes only: the file's, the schemas', and corral's version (in every key,
:func:`runner.cache.key_for`). So, as the spec cache keeps validated machines, this keeps

* a file's parse (:meth:`Checked.source`): its data and the position of every value, the
  :class:`~runner.documents.source.Source` a diagnostic is placed with, rebuilt without PyYAML;
* a verdict "these bytes pass that check" (:meth:`Checked.passes` / :meth:`Checked.passed`), recorded
  only for a check that found nothing: a failing document is always checked afresh, so its
  diagnostics are jsonschema's own, never a stale copy.

What is never cached: anything that depends on more than the bytes in the key. The lint (which names
the guards, effects and operations registered now, plugins included) runs every time on the source.
Entries are verified as the spec cache's are (header, key, body digest); a damaged one is ignored,
checked afresh and rewritten. Without a cache directory every call simply does the work.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from runner.cache import ContentCache, key_for
from runner.documents.source import Source, decode


class Checked:
    """Parses and schema verdicts by content under one cache directory (None: no cache)."""

    def __init__(self, directory: Path | None) -> None:
        self._cache = ContentCache(directory)

    def source(self, raw: bytes, shown: str) -> Source:
        """The parsed document in ``raw`` (the bytes of the file shown as ``shown``).

        Raises:
            SpecError: as :func:`runner.documents.yamlsource.parse` (a document that does not parse
                is never cached).
        """
        text = decode(raw, shown)
        key = key_for(b"source", raw)
        doc = self._cache.get(key)
        if isinstance(doc, dict) and "data" in doc and isinstance(doc.get("positions"), list):
            try:
                positions = {str(p): (int(line), int(column)) for p, line, column in doc["positions"]}
            except (TypeError, ValueError):
                self._cache.reject(key, "not a parsed source")
            else:
                return Source(shown, text, doc["data"], positions)
        elif doc is not None:
            self._cache.reject(key, "not a parsed source")
        from runner.documents import yamlsource  # PyYAML: only for bytes not parsed before

        source = yamlsource.parse(text, shown)
        positions_out = [[p, line, column] for p, (line, column) in source.positions.items()]
        self._cache.put(key, {"data": source.data, "positions": positions_out})
        return source

    def passes(self, check: str, *parts: bytes) -> bool:
        """Whether ``check`` was recorded as passing for exactly these bytes."""
        key = key_for(b"verdict", check.encode(), *parts)
        doc = self._cache.get(key)
        if doc is None:
            return False
        if doc != {"passed": check}:
            self._cache.reject(key, f"not a verdict of {check}")
            return False
        return True

    def passed(self, check: str, *parts: bytes) -> None:
        """Record that ``check`` found nothing wrong in these bytes."""
        self._cache.put(key_for(b"verdict", check.encode(), *parts), {"passed": check})


def canonical(value: Any) -> bytes:
    """``value`` as the bytes a verdict about it is filed under (sorted keys: equal values, equal bytes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@cache
def schema_bytes() -> bytes:
    """Every schema file's name and bytes: a verdict of any schema check is filed under all of them
    (schemas refer to one another)."""
    from runner.data import data_dir

    out = []
    for path in sorted(data_dir("schemas").glob("*.schema.json")):
        data = path.read_bytes()
        out.append(b"%s\0%d\0%s" % (path.name.encode(), len(data), data))
    return b"".join(out)

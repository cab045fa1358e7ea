"""One entry merged into a client's JSON or TOML configuration file, and the file replaced atomically.

The edit changes that entry and nothing else a reader of the file could see: a JSON document is loaded,
the entry set, and dumped again; a TOML file is edited as text (the entry's table and its sub-tables
replaced, or the table appended) and parsed again to prove it. Text that does not parse is refused
(``config_invalid``, with the line and column). Used by :mod:`runner.mcp.clients`; standard library only.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.errors import InvalidError

__all__ = ["dump_json", "merge_json", "merge_toml", "read", "replace", "toml_table"]


def read(path: Path) -> str | None:
    """The file's text, or None when there is none.

    Raises:
        InvalidError: ``config_invalid`` for a path that is not a regular file (a directory, a FIFO:
            never opened), an unreadable file, or bytes that are not UTF-8 (with the line and column).
    """
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # no such file (a parent is missing or a file)
        return None
    except OSError as exc:
        raise _invalid(path, f"unreadable ({exc.strerror or exc})", None, None) from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidError(
            f"{path} is not a regular file; move it away or name another --dir; nothing was written",
            code="config_invalid",
            path=str(path),
            line=None,
            column=None,
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _invalid(path, f"unreadable ({exc.strerror or exc})", None, None) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _invalid(path, "not UTF-8", line, exc.start - data.rfind(b"\n", 0, exc.start)) from None


def _invalid(path: Path, what: str, line: int | None, column: int | None) -> InvalidError:
    where = f"{path}:{line}:{column}" if line is not None and column is not None else str(path)
    return InvalidError(
        f"{where}: {what}; fix the file (or move it away) and run again; nothing was written",
        code="config_invalid",
        path=str(path),
        line=line,
        column=column,
    )


def merge_json(
    existing: str | None,
    key: tuple[str, str],
    entry: dict[str, Any],
    path: Path,
    skeleton: Mapping[str, Any] | None = None,
) -> str | None:
    """``existing`` (None: no file) with ``entry`` set at ``key``, as the new text; None when the
    entry is there already. A new (or blank) file starts from ``skeleton``.

    Raises:
        InvalidError: ``config_invalid`` when the text is not a JSON object, or ``key[0]`` is there but
            not an object.
    """
    outer, name = key
    if existing is None or not existing.strip():
        doc: dict[str, Any] = dict(skeleton or {})
        doc[outer] = {name: entry}
        return dump_json(doc)
    try:
        doc = json.loads(existing)
    except json.JSONDecodeError as exc:
        raise _invalid(path, f"not valid JSON ({exc.msg})", exc.lineno, exc.colno) from None
    if not isinstance(doc, dict):
        raise _invalid(path, "the document is not a JSON object", 1, 1)
    servers = doc.setdefault(outer, {})
    if not isinstance(servers, dict):
        raise _invalid(path, f"{outer!r} is not a JSON object", None, None)
    if servers.get(name) == entry:
        return None
    servers[name] = entry
    return dump_json(doc)


def dump_json(doc: Any) -> str:
    """A JSON document as a client's file holds it: indent 2, UTF-8 as is, a trailing newline."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_TOML_WHERE = re.compile(r"\(at line (\d+), column (\d+)\)")


def merge_toml(existing: str | None, key: tuple[str, str], entry: dict[str, Any], path: Path) -> str | None:
    """``existing`` (None: no file) with the table ``[key]`` replaced as text (or appended), as the new
    text; None when the entry is there already. The result is parsed again: it must hold ``entry`` at
    ``key`` and equal the original everywhere else.

    Raises:
        InvalidError: ``config_invalid`` when the text is not TOML; ``config_unmergeable`` when the
            entry is defined in a way a textual edit cannot replace (an inline table, dotted keys).
    """
    outer, name = key
    text = existing or ""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_WHERE.search(str(exc))
        line, column = (int(found.group(1)), int(found.group(2))) if found else (text.count("\n") + 1, None)
        raise _invalid(path, f"not valid TOML ({_TOML_WHERE.sub('', str(exc)).strip()})", line, column) from None
    servers = before.get(outer)
    if isinstance(servers, dict) and servers.get(name) == entry:
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    merged = _replace_tables(text, (outer, name), toml_table(outer, name, entry, newline), newline)
    try:
        after = tomllib.loads(merged)
    except tomllib.TOMLDecodeError:
        after = None
    # Invariant: the write changes the entry and nothing else a reader of the file could see.
    if (
        after is None
        or after.get(outer, {}).get(name) != entry
        or _canonical(_without(after, outer, name)) != _canonical(_without(before, outer, name))
    ):
        raise InvalidError(
            f"{path} defines {outer}.{name} in a way corral cannot replace as text (an inline table, "
            f"dotted keys, or a [{outer}.{name}] header inside a multi-line string); replace that "
            f"definition by hand with:\n{toml_table(outer, name, entry, chr(10))}nothing was written",
            code="config_unmergeable",
            path=str(path),
        )
    return merged


def _canonical(doc: Any) -> str:
    """A document as comparable text (``nan`` equals ``nan``; dates as their text; key order ignored)."""
    return json.dumps(doc, sort_keys=True, default=str)


def _without(doc: dict[str, Any], outer: str, name: str) -> dict[str, Any]:
    """``doc`` without ``outer.name`` (and without ``outer`` if that leaves it empty)."""
    rest = copy.deepcopy(doc)
    servers = rest.get(outer)
    if isinstance(servers, dict):
        servers.pop(name, None)
        if not servers:
            del rest[outer]
    return rest


def _replace_tables(text: str, prefix: tuple[str, ...], table: str, newline: str) -> str:
    """``text`` with every table under ``prefix`` (its header, keys and sub-tables) replaced by
    ``table`` where the first one stood, or ``table`` appended. Comments and blank lines after the last
    key of a removed table stay (they belong to what comes next), unless another removed table follows."""
    lines = text.splitlines(keepends=True)
    headers = [(i, path) for i, line in enumerate(lines) if (path := _header_path(line)) is not None]
    out: list[str] = []
    placed = False
    position = 0
    for n, (start, header) in enumerate(headers):
        end = headers[n + 1][0] if n + 1 < len(headers) else len(lines)
        if header[: len(prefix)] != prefix:
            continue
        out += lines[position:start]
        if not placed:
            out.append(table)
            placed = True
        if n + 1 < len(headers) and headers[n + 1][1][: len(prefix)] == prefix:
            position = end  # what lies between two of the replaced tables goes with them
            continue
        last = start
        for i in range(start, end):
            if lines[i].strip() and not lines[i].lstrip().startswith("#"):
                last = i
        position = last + 1
    out += lines[position:]
    merged = "".join(out)
    if placed:
        return merged
    if merged and not merged.endswith("\n"):
        merged += newline
    if merged.strip() and not merged.endswith(newline * 2):
        merged += newline
    return merged + table


def _header_path(line: str) -> tuple[str, ...] | None:
    """The key path of a ``[table]`` or ``[[array]]`` header line, or None for any other line.

    The line alone is parsed by tomllib, so quoting (``[mcp_servers."corral"]``), spacing and a
    trailing comment are read exactly as TOML reads them.
    """
    if not line.lstrip().startswith("["):
        return None
    try:
        doc: Any = tomllib.loads(line.strip())
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    while isinstance(doc, dict) and len(doc) == 1:
        key, doc = next(iter(doc.items()))
        path.append(key)
        if isinstance(doc, list) and len(doc) == 1:
            doc = doc[0]
    return tuple(path) if path and doc == {} else None


def toml_table(outer: str, name: str, entry: Mapping[str, Any], newline: str) -> str:
    """``[outer.name]`` and one ``key = value`` line per entry (strings, booleans, lists of them)."""
    lines = [f"[{_toml_key(outer)}.{_toml_key(name)}]"]
    lines += [f"{_toml_key(key)} = {_toml_value(value)}" for key, value in entry.items()]
    return newline.join(lines) + newline


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")  # the entries hold only the above


def _toml_string(value: str) -> str:
    """A TOML basic string: backslash, quote and every control character escaped."""
    out = []
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def replace(path: Path, text: str, new_mode: int, dir_mode: int) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file beside it, fsync, rename, fsync of the
    directory. An existing file's mode is kept."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a path that is not valid UTF-8 (surrogate escapes) in the entry
        raise InvalidError(
            f"the entry for {path} holds a path that is not valid UTF-8; install corral under a UTF-8 path",
            code="config_invalid",
            path=str(path),
        ) from None
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = new_mode
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)

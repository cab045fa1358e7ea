"""Property test: arguments built from each tool's own input schema, valid and deliberately invalid,
sent to every tool of one long-lived server (in process, over a scratch home with a lease and a
reviewer): never an ``internal`` error, never a protocol error, every schema-invalid call is
refused ``input_invalid``, and every ``input_invalid`` (the schema's or the service's own checks)
names an argument the tool takes.

The strategy reads the schema (types, enums, arrays, required and optional properties) rather than
using hypothesis-jsonschema; strings are drawn from values that mean something in the scratch home
(the controller that holds a lease, the reviewer's name and pane, real and missing directories) as
well as arbitrary text, so valid calls get past the first check. Waits always get a timeout under half a
second (never their long default); no example starts an agent (kinds are unknown ones: the flows test real starts).
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.mcp.tools import TOOLS
from tests.mcp.conftest import SHA, InProcess

pytestmark = pytest.mark.slow

JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=8)
HEX = st.text("0123456789abcdef", min_size=64, max_size=64)


def _hints(project: Path) -> dict[str, st.SearchStrategy[Any]]:
    words = st.sampled_from
    return {
        "controller": words(["ctl", "ghost", "bad id!", "", "/tmp/elsewhere", "../ctl"]),
        "name": words(["rev", "newbie", "Bad", ""]),
        "target": words(["rev", "p1", "p999", "nobody"]),
        "kind": words(["no-such-kind", ""]),
        "cwd": words([str(project), "/nonexistent/dir", "relative"]),
        "worktree": words([str(project), "/nonexistent/dir", "relative"]),
        "expect_cwd": words([str(project), "relative"]),
        "host": words(["process", "herdr-missing", ""]),
        "text": words(["echo hi", "x", ""]),
        "receipt": words(["corral-receipt-v1.00000000-0000-0000-0000-000000000000", "nope"]),
        "receipts[]": words(["corral-receipt-v1.00000000-0000-0000-0000-000000000000", "x"]),
        "requests[]": words(["rev", "echo hi"]),
        "authority_sha256": HEX | words(["XYZ"]),
        "checkpoint_sha256": HEX | words(["XYZ"]),
        "expect_lease": st.uuids().map(str) | words(["x"]),
        "machine": words(["controller", "reviewer", "nope"]) | st.none(),
        "recipe": words(["review", "nope"]) | st.none(),
        "plan_id": words(["nope", ""]),
        "format": words(["mermaid", "dot"]),
    }


SAFE_NUMBERS = {"timeout": st.floats(0, 0.3)}


def value_for(schema: dict[str, Any], name: str, hints: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Values valid under ``schema`` (hints first for the names they know)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    options: list[st.SearchStrategy[Any]] = []
    for kind in kinds:
        if kind == "string":
            text = st.text(string.printable, max_size=24)
            options.append(hints[name] | text if name in hints else text)
        elif kind == "integer":
            options.append(st.integers(-3, 5) | st.integers(-(2**40), 2**40))
        elif kind == "number":
            if name in SAFE_NUMBERS:
                options.append(SAFE_NUMBERS[name])
            else:
                options.append(st.floats(-1e6, 1e6, allow_nan=False) | st.integers(-5, 100))
        elif kind == "boolean":
            options.append(st.booleans())
        elif kind == "null":
            options.append(st.none())
        elif kind == "array":
            items = value_for(schema["items"], f"{name}[]", hints) if schema.get("items") else JSON_SCALARS
            options.append(st.lists(items, max_size=3))
        elif kind == "object":
            if "properties" in schema:
                options.append(object_for(schema, hints))
            else:
                options.append(st.dictionaries(st.text(max_size=6), JSON_SCALARS, max_size=3))
        elif kind is None:
            options.append(JSON_SCALARS)
    return st.one_of(options)


def object_for(schema: dict[str, Any], hints: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    props = schema["properties"]
    required = set(schema.get("required", [])) | ({"timeout"} & set(props))  # never the default (long) wait
    return st.fixed_dictionaries(
        {k: value_for(v, k, hints) for k, v in props.items() if k in required},
        optional={k: value_for(v, k, hints) for k, v in props.items() if k not in required},
    )


def wrong_type(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value of a JSON type ``schema`` does not allow."""
    kinds = schema.get("type")
    kinds = set(kinds if isinstance(kinds, list) else [kinds])
    pool: list[tuple[str, st.SearchStrategy[Any]]] = [
        ("string", st.text(max_size=5)),
        ("boolean", st.booleans()),
        ("null", st.none()),
        ("array", st.lists(st.integers(), max_size=2)),
        ("object", st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
    ]
    if not kinds & {"integer", "number"}:
        pool.append(("integer", st.integers()))
    return st.one_of([s for kind, s in pool if kind not in kinds and not (kind == "integer" and "number" in kinds)])


@st.composite
def invalid_for(draw: st.DrawFn, schema: dict[str, Any], hints: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    """Arguments the schema refuses: one of a wrong type, a missing required one, or one it does not take."""
    args = dict(draw(object_for(schema, hints)))
    props, required = schema["properties"], list(schema.get("required", []))
    ways = ["extra"] + (["missing"] if required else []) + (["type"] if props else [])
    way = draw(st.sampled_from(ways))
    if way == "extra":
        args[draw(st.text(string.ascii_lowercase, min_size=1, max_size=8).filter(lambda k: k not in props))] = 1
    elif way == "missing":
        del args[draw(st.sampled_from(required))]
    else:
        key = draw(st.sampled_from(sorted(props)))
        args[key] = draw(wrong_type(props[key]))
    return args


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcess, Path]]:
    root = tmp_path_factory.mktemp("properties")
    project = root / "project"
    project.mkdir()
    (project / "a.py").write_text("a = 1\n")
    with InProcess(root / "home") as running:
        running.ok("corral_controller_acquire", {"controller": "ctl", "authority_ref": "T", "authority_sha256": SHA})
        running.ok("corral_reviewer_start", {"controller": "ctl", "name": "rev", "kind": "script", "cwd": str(project)})
        yield running, project


def _outcome(result: Any) -> str | None:
    if not result.is_error:
        return None
    error = (result.structured_content or {}).get("error") or {}
    assert set(error) >= {"code", "message", "details"}, result
    code: str = error["code"]
    return code


READ_ONLY = [name for name, tool in TOOLS.items() if tool.hints.read_only]
MUTATING = [name for name, tool in TOOLS.items() if not tool.hints.read_only]
PROPERTY = settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", READ_ONLY + MUTATING)
@PROPERTY
@given(data=st.data())
def test_never_an_internal_error(server: tuple[InProcess, Path], name: str, data: st.DataObject) -> None:
    running, project = server
    schema = TOOLS[name].input_schema
    hints = _hints(project)
    if data.draw(st.booleans(), label="valid"):
        arguments = data.draw(object_for(schema, hints), label="arguments")
        result = running.call(name, arguments)
        code = _outcome(result)
        assert code != "internal", (name, arguments, result.structured_content)
        if code == "input_invalid":  # refused by the service's own checks: still names the tool's argument
            field = str(result.structured_content["error"]["details"].get("field"))
            assert field.partition(".")[0] in schema["properties"], (name, arguments, result.structured_content)
    else:
        arguments = data.draw(invalid_for(schema, hints), label="invalid arguments")
        result = running.call(name, arguments)
        assert _outcome(result) == "input_invalid", (name, arguments, result.structured_content)
        field = result.structured_content["error"]["details"]["field"]
        assert field.partition(".")[0] in set(schema["properties"]) | set(arguments), (name, arguments, field)

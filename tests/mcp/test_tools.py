"""The tool list as a client sees it: a reviewed snapshot, and the rules every schema keeps.

The snapshot (``tests/mcp/snapshots/tools.json``) holds each tool's name, title, description,
annotations and input and output schemas as ``tools/list`` returns them: any change to the tool
table fails here until it is reviewed and the snapshot regenerated with::

    CORRAL_UPDATE_SNAPSHOTS=1 python -m pytest tests/mcp/test_tools.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from runner.mcp.tools import TOOLS
from runner.service.inputs.fields import surface_fields
from tests.mcp.conftest import InProcess

MESH_TOOLS = frozenset(
    {"corral_mesh_checkin", "corral_mesh_agents", "corral_mesh_send", "corral_mesh_inbox", "corral_mesh_ack"}
)
"""The agent mesh's tools (issue 17): the agents' own, named for `corral mesh ...` (issue 30)."""
SNAPSHOT = Path(__file__).parent / "snapshots" / "tools.json"
REGENERATE = "CORRAL_UPDATE_SNAPSHOTS=1 python -m pytest tests/mcp/test_tools.py"
SECRET_WORDS = re.compile(r"credential|token|secret|fence|password", re.IGNORECASE)
NOT_SECRETS = frozenset(
    {
        ("corral_mesh_inbox", "wake_token"),
        ("corral_reviewer_start", "budget_tokens"),
        ("corral_writer_start", "budget_tokens"),
        *(
            (name, "agent_token")
            for name in ("corral_mesh_checkin", "corral_mesh_send", "corral_mesh_inbox", "corral_mesh_ack")
        ),
    }
)
"""Arguments a secret word names that carry no controller secret: a mesh wake token is the single-use
capability the wake-up prompt itself hands the agent (issue 17), never a fence token; a budget of
tokens is a count of model tokens; an agent token is the mesh agent's own identity (issue 24), which
an MCP client (no headers) can only give as an argument, never a controller's credential."""


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """``tools/list`` of the real server (in process), as JSON documents."""
    with InProcess(tmp_path_factory.mktemp("tools") / "home") as server:
        result = server.list_tools()
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in result.tools]


def test_snapshot_of_the_tool_list(listed: list[dict[str, Any]]) -> None:
    doc = {
        tool["name"]: {
            "title": tool.get("title"),
            "description": tool.get("description"),
            "annotations": tool.get("annotations"),
            "input_schema": tool.get("inputSchema"),
            "output_schema": tool.get("outputSchema"),
        }
        for tool in listed
    }
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get("CORRAL_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(text, encoding="utf-8")
    assert SNAPSHOT.exists(), f"no snapshot of the tool list: review the tools, then run {REGENERATE}"
    recorded = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    added, gone = sorted(set(doc) - set(recorded)), sorted(set(recorded) - set(doc))
    changed = sorted(name for name in set(doc) & set(recorded) if doc[name] != recorded[name])
    assert not (added or gone or changed), (
        f"the MCP tool list changed (added {added}, removed {gone}, changed {changed}): a client sees this. "
        f"Review the change, then regenerate the snapshot: {REGENERATE}"
    )
    assert SNAPSHOT.read_text(encoding="utf-8") == text, f"the snapshot is not in canonical form: {REGENERATE}"


def test_the_listing_is_the_tool_table(listed: list[dict[str, Any]]) -> None:
    assert [t["name"] for t in listed] == list(TOOLS)
    for tool in listed:
        hints = TOOLS[tool["name"]].hints
        assert tool["annotations"] == {
            "title": TOOLS[tool["name"]].title,
            "readOnlyHint": hints.read_only,
            "destructiveHint": hints.destructive,
            "idempotentHint": hints.idempotent,
            "openWorldHint": hints.open_world,
        }


def _combinators(schema: Any, where: str = "") -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("oneOf", "anyOf", "allOf", "not", "if", "then", "else", "$ref"):
                yield f"{where}/{key}"
            yield from _combinators(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for n, value in enumerate(schema):
            yield from _combinators(value, f"{where}/{n}")


def test_input_schemas_a_client_accepts(listed: list[dict[str, Any]]) -> None:
    """Objects with properties, no combinator anywhere (Claude-backed clients drop such servers), valid
    JSON Schema, defaults that validate, names corral_[a-z_]+ (or one of the agent mesh's own tools, named
    as issue 17 names them, or memory_[a-z_]+: the handoff memory's tools, as issue 18 names them),
    descriptions a model can read."""
    for tool in listed:
        name, schema = tool["name"], tool["inputSchema"]
        assert re.fullmatch(r"(?:corral|memory)_[a-z_]+", name) or name in MESH_TOOLS, name
        assert tool.get("description") and len(tool["description"]) >= 40, name
        assert tool.get("title"), name
        assert schema["type"] == "object" and isinstance(schema.get("properties"), dict), name
        assert schema.get("additionalProperties") is False, name
        assert list(_combinators(schema)) == [], (name, list(_combinators(schema)))
        jsonschema.Draft202012Validator.check_schema(schema)
        for required in schema.get("required", []):
            assert required in schema["properties"], (name, required)
        for arg, prop in schema["properties"].items():
            assert re.fullmatch(r"[a-z][a-z0-9_]*", arg), (name, arg)
            assert prop.get("description"), (name, arg)
            if "default" in prop:
                assert arg not in schema.get("required", []), (name, arg)
                assert list(jsonschema.Draft202012Validator(prop).iter_errors(prop["default"])) == [], (name, arg)


def test_every_tool_has_an_output_schema(listed: list[dict[str, Any]]) -> None:
    for tool in listed:
        schema = tool.get("outputSchema")
        assert isinstance(schema, dict) and schema.get("type") == "object", tool["name"]
        jsonschema.Draft202012Validator.check_schema(schema)


def _fenced(name: str) -> bool:
    """A tool acting under a controller's fence: its Input takes the credential (or a grant's proposal)."""
    cls = TOOLS[name].input_type
    return cls is not None and bool({f.name for f in dataclasses.fields(cls)} & {"credential", "proposal"})


def test_fenced_tools_take_the_controller_and_never_a_credential(listed: list[dict[str, Any]]) -> None:
    fenced = [t for t in listed if _fenced(t["name"])]
    assert len(fenced) >= 20  # the table really has them: this test is not vacuous
    for tool in fenced:
        schema = tool["inputSchema"]
        assert "controller" in schema["properties"] and "controller" in schema["required"], tool["name"]
    for tool in listed:
        for arg in tool["inputSchema"]["properties"]:
            assert not SECRET_WORDS.search(arg) or (tool["name"], arg) in NOT_SECRETS, (tool["name"], arg)
        cls = TOOLS[tool["name"]].input_type
        offered = {f.name for f in surface_fields(cls)} if cls is not None else set()
        assert not offered & {"credential", "proposal"}, tool["name"]

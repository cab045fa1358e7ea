"""Values JSON cannot hold are refused where they are read, with the file, line and field.

Each test here is one crash the fuzzer (``test_fuzz_loaders.py``) found, pinned down: integers over
Python's 4,300-digit conversion limit, YAML dates and ``!!binary``, NaN and infinities, explicit tags
on text their constructor cannot read, nesting past the recursion limit, non-UTF-8 bytes, and JSON
that Python's ``json`` reads but corral's readers cannot hold.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from runner import credentials
from runner.agents.kinds import Kinds
from runner.definitions.library import Library, validate_file
from runner.definitions.recipes import RecipeLibrary
from runner.documents import yamlsource
from runner.errors import CredentialError, SpecError
from runner.sandbox.validation import load_commands
from tests.support.gitrepo import commit, git

MACHINE = """\
# yaml-language-server: $schema=../schemas/machine.schema.json
machine: sample
version: {version}
description: A test machine.
initial: idle
states:
  idle: {{description: nothing yet}}
  done: {{description: finished, terminal: true}}
transitions:
  - trigger: finish
    source: idle
    dest: done
    guards: [{{name: fence, with: {{allow_expired: {arg}}}}}]
"""


def machine(tmp_path: Path, version: str = "1", arg: str = "true") -> Path:
    path = tmp_path / "sample.yaml"
    path.write_text(MACHINE.format(version=version, arg=arg))
    return path


def only(report_or_error: object) -> tuple[str, int | None, str]:
    diagnostics = getattr(report_or_error, "diagnostics", [])
    assert len(diagnostics) == 1, diagnostics
    first = diagnostics[0]
    return first.code, first.line, first.pointer


@pytest.mark.parametrize("digits", ["9" * 5000, "-" + "9" * 4400, "0x" + "f" * 6000, "9223372036854775808"])
def test_integers_beyond_64_bits_are_refused_with_their_line(tmp_path: Path, digits: str) -> None:
    report, spec = validate_file(machine(tmp_path, version=digits))
    assert spec is None
    assert only(report) == ("spec_unsupported_value", 3, "/version")
    assert "64-bit" in report.diagnostics[0].message
    with pytest.raises(SpecError) as caught:
        Library(cache_dir=tmp_path / "cache").load(machine(tmp_path, version=digits))
    assert caught.value.code == "spec_unsupported_value"
    assert not (tmp_path / "cache").exists(), "nothing is cached for a refused definition"


def test_64_bit_bounds_themselves_are_accepted() -> None:
    data = yamlsource.parse("a: 9223372036854775807\nb: -9223372036854775808\n", "x.yaml").data
    assert data == {"a": 2**63 - 1, "b": -(2**63)}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("!!binary aGk=", "bytes"),
        ("!!timestamp 2026-01-01", "quote it"),
        (".nan", "finite"),
        (".inf", "finite"),
        ("-.inf", "finite"),
        ("1.0e+999", "finite"),
    ],
)
def test_values_json_cannot_hold_are_refused_in_a_machine_with(tmp_path: Path, value: str, message: str) -> None:
    report, spec = validate_file(machine(tmp_path, arg=value))
    assert spec is None
    code, line, pointer = only(report)
    assert (code, line, pointer) == ("spec_unsupported_value", 13, "/transitions/0/guards/0/with/allow_expired")
    assert message in report.diagnostics[0].message


def test_an_unquoted_date_stays_the_string_it_looks_like() -> None:
    source = yamlsource.parse("when: 2026-01-01\nat: 2026-01-01T10:00:00Z\n2026-02-02: key\n", "x.yaml")
    assert source.data == {"when": "2026-01-01", "at": "2026-01-01T10:00:00Z", "2026-02-02": "key"}
    json.dumps(source.data)


@pytest.mark.parametrize("text", ["a: !!int abc", "a: !!bool maybe", "a: !!float x", "a: !!timestamp nope"])
def test_an_explicit_tag_its_constructor_cannot_read_is_malformed_yaml(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        yamlsource.parse(text, "x.yaml")
    assert caught.value.code == "spec_yaml"
    assert caught.value.diagnostics[0].line == 1 and caught.value.diagnostics[0].column == 4


def test_nesting_is_bounded_in_the_text_and_through_aliases() -> None:
    nested: list[object] = []
    for _ in range(99):
        nested = [nested]
    assert yamlsource.parse("[" * 100 + "]" * 100, "ok.yaml").data == nested  # 100 deep is allowed
    with pytest.raises(SpecError, match="nest deeper than 100"):
        yamlsource.parse("[" * 101 + "]" * 101, "deep.yaml")
    chain = "x0: &x0 [1]\n" + "".join(f"x{i}: &x{i} [*x{i - 1}]\n" for i in range(1, 120))
    with pytest.raises(SpecError, match="nest deeper than 100") as caught:
        yamlsource.parse(chain, "chain.yaml")
    # It names the first value past the bound: x98 (line 99), a mapping holding 99 lists inside it.
    assert (caught.value.diagnostics[0].line, caught.value.diagnostics[0].path) == (99, "chain.yaml")


def test_bytes_that_are_not_utf8_are_refused_with_their_position(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(MACHINE.format(version=1, arg="true").replace("nothing", "n\u00e9ant").encode("latin-1"))
    report, spec = validate_file(path)
    assert spec is None
    assert only(report) == ("spec_encoding", 7, "")
    assert report.diagnostics[0].column == 24  # "  idle: {description: n" is 23 characters
    assert "not UTF-8 at byte" in report.diagnostics[0].message


def test_a_recipe_extending_a_non_utf8_recipe_is_refused(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_bytes(b"recipe: base\nversion: 1\ndescription: caf\xe9\nsteps: []\n")
    (tmp_path / "mine.yaml").write_text("recipe: mine\nversion: 1\ndescription: mine\nextends: base\n")
    with pytest.raises(SpecError) as caught:
        RecipeLibrary([tmp_path]).get("mine")
    assert caught.value.code == "spec_encoding"
    assert caught.value.diagnostics[0].line == 3


def test_agents_yaml_with_a_huge_integer_or_bad_bytes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text(f"kinds:\n  local:\n    argv: [echo]\n    blocked_exit_codes: [{'9' * 5000}]\n")
    with pytest.raises(SpecError) as caught:
        Kinds.load([path], cache_dir=tmp_path / "cache")
    assert (caught.value.code, caught.value.diagnostics[0].line) == ("spec_unsupported_value", 4)
    path.write_bytes(b"kinds:\n  local:\n    argv: [ech\xff]\n")
    with pytest.raises(SpecError) as caught:
        Kinds.load([path], cache_dir=tmp_path / "cache")
    assert caught.value.code == "spec_encoding"


def test_validate_yaml_that_is_not_utf8_is_refused_not_replaced(tmp_path: Path, hermetic_git: None) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    head = commit(tmp_path, "checks", {".corral/validate.yaml": b"validations:\n  - name: t\xff\n    argv: [true]\n"})
    with pytest.raises(SpecError) as caught:
        load_commands(str(tmp_path), head)
    assert caught.value.code == "spec_encoding"
    assert caught.value.diagnostics[0].line == 2


def test_json_documents_yaml_11_cannot_read_are_read_as_strict_json() -> None:
    text = json.dumps({"plan": "p", "inputs": {"prompt": "review \U0001f600"}})  # escapes a surrogate pair
    assert yamlsource.parse(text, "plan.json").data["inputs"]["prompt"] == "review \U0001f600"
    assert yamlsource.parse('{"plan":\t"p"}', "plan.json").data == {"plan": "p"}
    assert yamlsource.parse('{"a": NaN}', "plan.json").data == {"a": "NaN"}  # YAML reads a word
    for bad in ('{"a": 1, "a": 2}', '{"a": "\\ud800"}', '{"a":\t"\\udc00"}', "[" * 101 + "]" * 101):
        with pytest.raises(SpecError) as caught:
            yamlsource.parse(bad, "plan.json")
        assert caught.value.category == "invalid"


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"a": NaN}', '{"a": -Infinity}', "[1e999]", '{"a": 1, "a": 2}', "9" * 5000, '"\\udc00"'],
)
def test_strict_json_refuses_what_python_json_lets_through(text: str) -> None:
    from runner import jsonvalues  # imported here so this file also runs (and fails) on older code

    with pytest.raises(jsonvalues.JSONValueError):
        jsonvalues.loads(text)


def test_a_credential_file_of_nested_brackets_is_corrupt_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    for body in ("[" * 100_000, textwrap.dedent('{"format": 1, "generation": ' + "9" * 5000 + "}")):
        path.write_text(body)
        path.chmod(0o600)
        with pytest.raises(CredentialError) as caught:
            credentials.load(path, "ctl", "sqlite:///x.db")
        assert caught.value.code == "credential_corrupt"

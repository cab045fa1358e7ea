"""Hostile definitions and inputs: every loader refuses with an ``invalid`` CorralError, never a traceback.

The corpus is corral's own shipped files (machines, recipes, example plans) and a valid agents.yaml,
validate.yaml and credential file, each mutated the way a careless or hostile author would: one
scalar replaced by a huge integer, an unquoted date, ``!!binary``, ``.nan``, deep nesting, an alias,
bytes that are not UTF-8, a tab, a repeated key, a list where a mapping belongs, an empty document;
plus random text and bytes. Each loader must return or raise a CorralError whose category is
``invalid`` (exit 3), and write nothing but what a valid definition may cache. A smaller set goes
through the real ``corral validate`` / ``corral run`` executables: exit 0 or 3 with a stable code,
never 1.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import credentials
from runner.agents.kinds import Kinds
from runner.data import data_dir
from runner.definitions.library import Library, validate_file
from runner.definitions.plans import check_plan_document
from runner.definitions.recipes import RecipeLibrary, validate_inputs
from runner.documents import yamlsource
from runner.errors import CorralError
from runner.fence import Credential
from runner.sandbox.validation import load_commands
from runner.service import ValidateInput
from runner.service import validate as validate_files
from tests.support.gitrepo import commit, git

pytestmark = pytest.mark.slow  # Hypothesis: 150 mutated documents per loader

HOSTILE_VALUES = [
    "9" * 5000,
    "-" + "9" * 4400,
    "0x" + "f" * 6000,
    "9223372036854775808",
    "2026-01-01",
    "2026-01-01T10:00:00Z",
    "!!timestamp 2026-01-01",
    "!!binary aGk=",
    "!!binary '%%%'",
    ".nan",
    ".inf",
    "-.inf",
    "1.0e+999",
    "!!int abc",
    "!!bool maybe",
    "!!float x",
    "!!timestamp nope",
    "!!set {a: null}",
    "!!omap [a: 1]",
    "!!python/object/apply:os.system [true]",
    "!!str",
    "[" * 300 + "]" * 300,
    "{a: " * 120 + "1" + "}" * 120,
    '"\\0"',
    '"\\x07"',
    "~",
    "[]",
    "{}",
    "[1, 2]",
    "*undefined",
    "&anchor 1",
    "=",
    "? [a]",
    "on",
    "1:20",
    "010",
    "-",
    "a: b: c",
    '"unterminated',
    "\t1",
    "h\u00e9llo \U0001f600",
    "x" * 20000,
]

MUTATIONS = ["value", "value", "value", "tab", "duplicate", "truncate", "empty", "bytes", "list", "alias", "bomb"]
SCALAR_LINE = re.compile(r"^(\s*(?:- )?[A-Za-z_][\w-]*:[ ]+)(\S.*)$")
LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n"
    for i in range(1, 9)
)

AGENTS_YAML = """\
kinds:
  local:
    argv: ["{python}", -m, runner.agents.demo_agent]
    prompt: stdin
    blocked_exit_codes: [3]
    blocked_marker: CORRAL-BLOCKED
"""
VALIDATE_YAML = """\
validations:
  - name: tests
    argv: [python3, -m, pytest, -q]
    timeout: 60
    env: {PYTHONDONTWRITEBYTECODE: "1"}
"""
STORE = "sqlite:///tmp/fuzz.db"
CREDENTIAL = Credential("ctl", "11111111-2222-3333-4444-555555555555", 3, "f" * 32)
CREDENTIAL_JSON = json.dumps(
    {"format": 1, "controller_id": "ctl", "lease_id": CREDENTIAL.lease_id, "generation": 3,
     "token": CREDENTIAL.token, "store": STORE},
    indent=1,
)  # fmt: skip


def shipped(kind: str) -> list[tuple[str, bytes]]:
    """The shipped files of one kind, as (name, bytes)."""
    if kind == "machine":
        paths = sorted(data_dir("machines").glob("*.yaml"))
    elif kind == "recipe":
        paths = sorted(data_dir("recipes").glob("*.yaml"))
    else:
        paths = sorted((data_dir("recipes") / "examples").glob("*.yaml"))
    return [(p.name, p.read_bytes()) for p in paths]


@st.composite
def mutated(draw: st.DrawFn, originals: list[tuple[str, bytes]]) -> bytes:
    """One original with one hostile change (or random text or bytes instead of it)."""
    _, raw = draw(st.sampled_from(originals))
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.text(max_size=200).map(str.encode), st.binary(max_size=200)))
    lines = raw.decode("utf-8").splitlines(keepends=True)
    how = draw(st.sampled_from(MUTATIONS))
    at = draw(st.integers(0, max(len(lines) - 1, 0)))
    scalars = [i for i, line in enumerate(lines) if SCALAR_LINE.match(line)]
    if how in ("value", "list", "alias") and scalars:
        at = draw(st.sampled_from(scalars))
        match = SCALAR_LINE.match(lines[at])
        assert match is not None
        new = {"value": draw(st.sampled_from(HOSTILE_VALUES)), "list": "[a, {b: 1}]", "alias": "*nowhere"}[how]
        if how == "alias" and len(scalars) > 1:
            other = draw(st.sampled_from(scalars))
            first = SCALAR_LINE.match(lines[other])
            assert first is not None
            lines[other] = f"{first.group(1)}&mark {first.group(2)}\n"
            new = "*mark"
        lines[at] = f"{match.group(1)}{new}\n"
    elif how == "tab" and lines:
        lines[at] = "\t" + lines[at]
    elif how == "duplicate" and lines:
        lines.insert(at, lines[at])
    elif how == "truncate":
        cut = draw(st.integers(0, len(raw)))
        return raw[:cut]
    elif how == "empty":
        return draw(st.sampled_from([b"", b"---\n", b"# only a comment\n", b"---\n---\n", b"null\n", b"[]\n"]))
    elif how == "bytes":
        cut = draw(st.integers(0, len(raw)))
        return raw[:cut] + draw(st.sampled_from([b"\xff", b"\xe9", b"\xc3", b"\x00", b"\xed\xa0\x80"])) + raw[cut:]
    elif how == "bomb":
        return LAUGHS.encode() + raw
    return "".join(lines).encode("utf-8")


def refused_or_returned(call: Callable[[], Any]) -> Any:
    """Run one loader: it returns, or raises a CorralError of category ``invalid``; nothing else."""
    try:
        return call()
    except CorralError as exc:
        assert exc.category == "invalid", f"{exc.code}: {exc.message}"
        assert exc.code and exc.code != "internal", exc.message
        json.dumps(exc.to_dict())  # every error can be reported as JSON
        return exc


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="corral-fuzz-") as name:
        yield Path(name)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.timeout(60)
@FUZZ
@given(text=st.one_of(st.text(max_size=300), st.sampled_from(HOSTILE_VALUES).map(lambda v: f"a: {v}\n")))
def test_yaml_and_json_text(text: str) -> None:
    """Any text: a Source of JSON values, or an invalid SpecError; JSON texts go the same way."""
    result = refused_or_returned(lambda: yamlsource.parse(text, "fuzz.yaml"))
    if isinstance(result, yamlsource.Source):
        json.dumps(result.data, allow_nan=False)  # only JSON values come out
    as_json = json.dumps({"plan": text})
    assert refused_or_returned(lambda: yamlsource.parse(as_json, "fuzz.json")).data == {"plan": text}


@pytest.mark.timeout(60)
@FUZZ
@given(raw=st.binary(max_size=300))
def test_random_bytes(raw: bytes) -> None:
    """Bytes that may not be UTF-8 are decoded or refused with spec_encoding and a position."""
    result = refused_or_returned(lambda: yamlsource.parse(yamlsource.decode(raw, "fuzz.yaml"), "fuzz.yaml"))
    if isinstance(result, CorralError) and result.code == "spec_encoding":
        assert result.details["diagnostics"][0]["line"] >= 1


@pytest.mark.timeout(60)
@FUZZ
@given(raw=mutated(shipped("machine")))
def test_machine_definitions(raw: bytes, workdir: Path) -> None:
    """validate_file never raises; Library.load refuses with SpecError and caches only valid specs."""
    path = workdir / "machines" / "fuzzed.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(raw)
    report, spec = validate_file(path)
    assert report.ok == (spec is not None)
    assert all(d.code != "internal" for d in report.diagnostics)
    json.dumps([d.to_dict() for d in report.diagnostics])
    cache = workdir / "cache-machines"
    before = files_under(cache) if cache.exists() else set()
    loaded = refused_or_returned(lambda: Library(cache_dir=cache).load(path))
    if isinstance(loaded, CorralError):
        assert (files_under(cache) if cache.exists() else set()) == before, "a refused machine was cached"
    else:
        json.dumps(loaded.to_json(), allow_nan=False)


@pytest.mark.timeout(60)
@FUZZ
@given(raw=mutated(shipped("recipe")))
def test_recipes(raw: bytes, workdir: Path) -> None:
    """A local recipe (renamed so no built-in shadows it) resolves and lints, or is refused."""
    directory = workdir / "recipes"
    directory.mkdir(exist_ok=True)
    raw = re.sub(rb"(?m)^recipe: [a-z-]+$", b"recipe: fuzzed", raw)
    path = directory / "fuzzed.yaml"
    path.write_bytes(raw)
    library = RecipeLibrary([directory])
    diagnostics = library.validate_file(path)
    assert all(d.code != "internal" for d in diagnostics)
    resolved = refused_or_returned(lambda: RecipeLibrary([directory]).get("fuzzed"))
    if not isinstance(resolved, CorralError):
        json.dumps(resolved.to_json(), allow_nan=False)
        assert resolved.sha256


@pytest.mark.timeout(60)
@FUZZ
@given(raw=mutated(shipped("plan")))
def test_plans(raw: bytes, workdir: Path) -> None:
    """A plan document: parsed, schema-checked and its inputs checked, or refused; then JSON."""
    path = workdir / "plan.yaml"
    path.write_bytes(raw)
    recipes = RecipeLibrary([])

    def load() -> Any:
        doc = check_plan_document(yamlsource.load(path).data)
        inputs = validate_inputs(recipes.get(doc["recipe"]), dict(doc.get("inputs") or {}))
        return json.dumps(inputs, allow_nan=False)  # what submit records

    refused_or_returned(load)
    reports = validate_files(Library(), ValidateInput((path,)))
    assert [d.code for r in reports for d in r.diagnostics if d.code == "internal"] == []


@pytest.mark.timeout(60)
@FUZZ
@given(raw=mutated([("agents.yaml", AGENTS_YAML.encode())]))
def test_agents_yaml(raw: bytes, workdir: Path) -> None:
    path = workdir / "home" / "agents.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(raw)
    kinds = refused_or_returned(lambda: Kinds.load([path], cache_dir=workdir / "cache-kinds"))
    if isinstance(kinds, Kinds):
        for kind in kinds:
            assert all(isinstance(part, str) for part in kind.argv)


@pytest.mark.timeout(60)
@FUZZ
@given(raw=mutated([("ctl.json", CREDENTIAL_JSON.encode())]))
def test_credential_files(raw: bytes, workdir: Path) -> None:
    """A 0600 credential file with hostile content: a Credential, or a CredentialError (exit 3)."""
    path = workdir / "credentials" / "ctl.json"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    for hostile in (raw, b"[" * 100_000, CREDENTIAL_JSON.replace(": 3,", ": " + "9" * 5000 + ",").encode()):
        path.write_bytes(hostile)
        path.chmod(0o600)
        loaded = refused_or_returned(lambda: credentials.load(path, "ctl", STORE))
        assert isinstance(loaded, Credential | CorralError)


@pytest.fixture(scope="module")
def validate_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.gitrepo import GIT_ENV

    for name, value in GIT_ENV.items():
        os.environ.setdefault(name, value)
    repo = tmp_path_factory.mktemp("validate-repo")
    git(repo, "init", "-q", "-b", "main")
    return repo


@pytest.mark.timeout(90)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=mutated([("validate.yaml", VALIDATE_YAML.encode())]))
def test_validate_yaml(raw: bytes, validate_repo: Path) -> None:
    """``.corral/validate.yaml`` at a real commit: commands, or an invalid refusal."""
    head = commit(validate_repo, "validations", {".corral/validate.yaml": raw, "n": os.urandom(8).hex()})
    commands = refused_or_returned(lambda: load_commands(str(validate_repo), head))
    if isinstance(commands, list):
        assert all(isinstance(part, str) for command in commands for part in command.argv)


# --- the real executable ----------------------------------------------------------------------------


def corral_exe() -> str:
    return str(Path(sys.executable).parent / "corral")


def rows(database: Path, table: str) -> int:
    if not database.exists():
        return 0
    with sqlite3.connect(database) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.mark.slow
@pytest.mark.timeout(120)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machine=mutated(shipped("machine")), plan=mutated(shipped("plan")))
def test_validate_and_run_executables(machine: bytes, plan: bytes, workdir: Path) -> None:
    """``corral validate FILE... --json`` and ``corral run PLAN --json``: exit 0 or 3 with a code, never 1."""
    home = workdir / "exe-home"
    env = {**os.environ, "CORRAL_HOME": str(home), "CORRAL_AGENT_HOST": "process"}
    env.pop("CORRAL_STORE", None)
    files = workdir / "exe"
    files.mkdir(exist_ok=True)
    (files / "machine.yaml").write_bytes(machine)
    (files / "plan.yaml").write_bytes(plan)
    good = data_dir("machines") / "controller.yaml"
    args = [corral_exe(), "validate", str(files / "machine.yaml"), str(files / "plan.yaml"), str(good), "--json"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=files, timeout=60, check=False)
    assert done.returncode in (0, 3), done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert [f["ok"] for f in doc["files"]][2] is True, "one bad file must not decide another's verdict"
    for entry in doc["files"]:
        assert entry["ok"] or all(d["code"] not in ("", "internal") for d in entry["diagnostics"])

    events = rows(home / "corral.db", "events")
    run = [corral_exe(), "run", str(files / "plan.yaml"), "--json"]
    done = subprocess.run(run, capture_output=True, text=True, env=env, cwd=files, timeout=60, check=False)
    assert "Traceback" not in done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    if done.returncode == 3:
        assert lines[-1]["error"]["code"] not in ("", "internal")
        assert rows(home / "corral.db", "events") == events, "a refused plan wrote events"
    elif "error" in lines[-1]:  # refused on the store's state (the home outlives one example: plan_conflict, 5)
        assert done.returncode in (4, 5), done.stdout + done.stderr
        assert lines[-1]["error"]["code"] not in ("", "internal")
    else:  # the plan was accepted: it ran, and its outcome is a summary, not an error
        assert done.returncode in (0, 1, 5), done.stdout + done.stderr
        assert lines[-1].get("event") == "summary", lines[-1]

"""The real ``corral`` executable: exit statuses, --json documents, and no token in any output."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.runs import Run

SHA = "c" * 64


@pytest.fixture
def corral(cli_env: dict[str, str], tmp_path: Path) -> Any:
    outputs: list[str] = []

    def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Run:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            capture_output=True,
            text=True,
            env=env or cli_env,
            cwd=cwd or tmp_path,
            timeout=60,
            check=False,
        )
        outputs.append(proc.stdout + proc.stderr)
        return Run(proc)

    run.outputs = outputs  # type: ignore[attr-defined]
    return run


def token_of(home: Path, controller: str = "ctl") -> str:
    return str(json.loads((home / "credentials" / f"{controller}.json").read_text())["token"])


def acquire(corral: Any, controller: str = "ctl", *extra: str) -> Run:
    return corral(
        "controller", "acquire", "--controller", controller, "--authority-ref", "T-1", "--authority-sha256", SHA,
        "--json", *extra,
    )  # fmt: skip


def test_controller_lifecycle_end_to_end(corral: Any, home: Path) -> None:
    first = acquire(corral)
    assert first.code == 0, first.err
    doc = first.json()
    assert doc["lease"]["generation"] == 1 and doc["lease"]["state"] == "active"
    cred_path = Path(doc["credential_path"])
    assert cred_path == home / "credentials" / "ctl.json"
    assert stat.S_IMODE(cred_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    tokens = [token_of(home)]

    old = home / "old.json"
    old.write_bytes(cred_path.read_bytes())
    old.chmod(0o600)
    assert corral("controller", "renew", "--controller", "ctl", "--json").code == 0
    resumed = corral("controller", "resume", "--controller", "ctl", "--json")
    assert resumed.code == 0 and resumed.json()["lease"]["generation"] == 2
    tokens.append(token_of(home))

    stale = corral("controller", "renew", "--controller", "ctl", "--credential", str(old), "--json")
    assert stale.code == 4
    assert stale.json()["error"]["code"] == "fence_stale"
    assert stale.json()["error"]["details"]["presented_generation"] == 1

    held = acquire(corral)
    assert held.code == 4 and held.json()["error"]["code"] == "lease_held"

    listed = corral("controller", "list", "--json").json()["leases"]
    assert [(x["controller_id"], x["generation"], x["expired"]) for x in listed] == [("ctl", 2, False)]

    released = corral(
        "controller", "release", "--controller", "ctl", "--checkpoint-ref", "abc", "--checkpoint-sha256", SHA,
    )  # fmt: skip
    assert released.code == 0, released.err
    assert not cred_path.exists(), "release deletes the dead credential"

    events = [json.loads(line) for line in corral("events", "--json").out.splitlines()]
    assert [e["trigger"] for e in events] == ["acquire", "renew", "resume", "release"]
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    actors = [e["actor"] for e in events]
    assert all(re.fullmatch(r"cli:[^@\s]+@[^:\s]+:\d+", a) for a in actors), actors
    assert len(set(actors)) == 4, "who, on which machine, and which process: each command is its own"
    assert corral("events", "--since", str(events[1]["seq"]), "--json").out.count("\n") == 2

    text = corral("events").out
    assert "acquire: absent -> active" in text

    for output in corral.outputs:
        for token in tokens:
            assert token not in output


def test_human_output_is_readable(corral: Any) -> None:
    run = corral(
        "controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA,
    )  # fmt: skip
    assert run.code == 0
    assert "acquired controller ctl: active" in run.out and "generation 1" in run.out
    assert "the token is never printed" in run.out
    listing = corral("controller", "list")
    assert "ctl" in listing.out and "active" in listing.out


@pytest.mark.parametrize(
    ("args", "code", "exit_status"),
    [
        (["controller", "acquire", "--controller", "bad id", "--authority-ref", "T", "--authority-sha256", SHA],
         "input_invalid", 3),
        (["controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA,
          "--ttl", "3"], "input_invalid", 3),
        (["controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", "xyz"],
         "input_invalid", 3),
        (["controller", "renew", "--controller", "ctl"], "credential_missing", 3),
        (["controller", "list", "--controller", "ghost"], "controller_unknown", 3),
        (["controller", "takeover", "--controller", "ghost", "--expect-lease",
          "11111111-2222-3333-4444-555555555555"], "controller_unknown", 3),
        (["controller", "acquire", "--controller", "ctl"], "usage", 2),
        (["controller", "frobnicate"], "usage", 2),
        (["draw", "nosuchmachine"], "machine_unknown", 3),
        (["--store", "postgresql://u:pw@/db?host=/nonexistent", "controller", "list"], "store_unavailable", 5),
    ],
)  # fmt: skip
def test_bad_input_is_a_clear_json_error(corral: Any, home: Path, args: list[str], code: str, exit_status: int) -> None:
    run = corral(*args, "--json")
    assert run.code == exit_status, (run.out, run.err)
    error = run.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert "pw@" not in run.out
    assert not (home / "credentials" / "ctl.json").exists(), "nothing half-written"


def test_ttl_error_names_the_field(corral: Any) -> None:
    run = acquire(corral, "ctl", "--ttl", "100000")
    assert run.json()["error"]["details"] == {"field": "ttl_seconds", "minimum": 5, "maximum": 86400}


def test_errors_without_json_go_to_stderr(corral: Any) -> None:
    run = corral("controller", "renew", "--controller", "ctl")
    assert run.code == 3 and run.out == ""
    assert run.err.startswith("error [credential_missing]:")


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda p: p.write_text("{broken"), "credential_corrupt"),
        (lambda p: p.chmod(0o640), "credential_insecure"),
    ],
)
def test_unusable_credential_file(corral: Any, home: Path, mutate: Any, code: str) -> None:
    assert acquire(corral).code == 0
    path = home / "credentials" / "ctl.json"
    mutate(path)
    run = corral("controller", "renew", "--controller", "ctl", "--json")
    assert (run.code, run.json()["error"]["code"]) == (3, code)


def test_credential_from_another_store_is_refused(corral: Any, home: Path, cli_env: dict[str, str]) -> None:
    assert acquire(corral).code == 0
    other = {**cli_env, "CORRAL_STORE": f"sqlite://{home / 'other.db'}"}
    run = corral("controller", "renew", "--controller", "ctl", "--json", env=other)
    assert run.json()["error"]["code"] == "credential_store_mismatch"


def test_validate_reports_ok_and_fail_per_file(corral: Any, tmp_path: Path) -> None:
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "broken.yaml").write_text("machine: broken\nstates: [\n")
    (machines / "guarded.yaml").write_text(
        textwrap.dedent(
            """\
            # yaml-language-server: $schema=x
            machine: guarded
            version: 1
            description: d
            initial: a
            states:
              a: {description: a}
              b: {description: b, terminal: true}
            transitions:
              - {trigger: go, source: a, dest: b, guards: [nope]}
            """
        )
    )
    run = corral("validate")
    assert run.code == 3
    lines = run.out.splitlines()
    assert any(line.startswith("OK") and "controller.yaml" in line for line in lines)
    assert "FAIL machines/broken.yaml" in lines
    assert "FAIL machines/guarded.yaml" in lines
    assert any("machines/guarded.yaml:10:" in line and "spec_unknown_guard" in line for line in lines)
    doc = corral("validate", "--json").json()
    assert doc["ok"] is False
    by_path = {f["path"]: f for f in doc["files"]}
    assert by_path["machines/broken.yaml"]["diagnostics"][0]["code"] == "spec_yaml"
    assert by_path["machines/guarded.yaml"]["diagnostics"][0]["line"] == 10
    only_builtin = corral("validate", str(Path(__file__).resolve().parents[2] / "machines"))
    assert only_builtin.code == 0, only_builtin.out


def test_local_machine_may_not_shadow_a_builtin(corral: Any, tmp_path: Path) -> None:
    machines = tmp_path / "machines"
    machines.mkdir()
    builtin = Path(__file__).resolve().parents[2] / "machines" / "controller.yaml"
    (machines / "controller.yaml").write_text(builtin.read_text())
    run = corral("validate", "--json")
    codes = [d["code"] for f in run.json()["files"] for d in f["diagnostics"]]
    assert run.code == 3 and codes == ["spec_shadows_builtin"]


def test_validate_strict_fails_on_warnings(corral: Any, tmp_path: Path) -> None:
    path = tmp_path / "lonely.yaml"
    path.write_text(
        "machine: lonely\nversion: 1\ndescription: d\ninitial: a\nstates: {a: {description: a}, b: {description: b}}\n"
        "transitions: [{trigger: go, source: a, dest: b}]\n"
    )
    assert corral("validate", str(path)).code == 0
    assert corral("validate", "--strict", str(path)).code == 3


def test_machines_and_draw(corral: Any, tmp_path: Path) -> None:
    listed = corral("machines", "--json").json()["machines"]
    assert [(m["name"], m["builtin"], m["states"], m["transitions"]) for m in listed] == [
        ("adopted", True, 6, 6),
        ("controller", True, 3, 5),
        ("pane", True, 4, 3),
        ("plan", True, 7, 10),  # retry: failed -> running; renew_runner: the runner's lease (issue 16)
        ("receipt", True, 6, 5),
        ("reviewer", True, 9, 7),
        ("wake", True, 6, 3),
        ("writer", True, 9, 8),
    ]
    mermaid = corral("draw", "controller")
    assert mermaid.code == 0 and mermaid.out.startswith("stateDiagram-v2\n")
    assert "active --> active : renew [fence] / extend_lease" in mermaid.out
    dot = corral("draw", "controller", "--format", "dot").out
    assert dot.startswith('digraph "controller"') and '"active" -> "released"' in dot
    out = tmp_path / "controller.svg"
    drew = corral("draw", "controller", "--format", "svg", "--out", str(out), "--json")
    assert drew.code == 0, drew.err
    assert drew.json() == {"machine": "controller", "format": "svg", "out": str(out)}
    svg = out.read_text()
    assert "<svg" in svg and "takeover" in svg and "lease_predecessor" in svg


def test_cold_import_of_the_hot_path_avoids_heavy_modules(cli_env: dict[str, str], home: Path) -> None:
    """A transition must not pay for jsonschema, YAML parsing, rich, GitPython or anyio once specs are cached."""
    script = textwrap.dedent(
        """
        import sys
        from runner.cli.app import main
        main(["controller", "acquire", "--controller", "warm", "--authority-ref", "T", "--authority-sha256", "SHA"])
        heavy = [m for m in ("jsonschema", "rich", "git", "yaml", "anyio") if m in sys.modules]
        print("heavy=" + ",".join(heavy))
        """.replace("SHA", SHA)
    )
    env = {**cli_env, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True)  # fills cache
    script = script.replace("acquire", "renew").replace(
        ', "--authority-ref", "T", "--authority-sha256", "SHA"'.replace("SHA", SHA), ""
    )
    second = subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True)
    assert second.stdout.strip().splitlines()[-1] == "heavy="
    assert os.path.isdir(home / "cache" / "specs")


def test_machines_lists_a_broken_local_file_without_hiding_the_rest(corral: Any, tmp_path: Path) -> None:
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "broken.yaml").write_text("machine: [\n")
    found = corral("machines", "--json")
    assert found.code == 0
    rows = {m["name"]: m for m in found.json()["machines"]}
    assert rows["controller"]["error"] is None
    assert rows["broken"]["builtin"] is False and "spec_yaml" in rows["broken"]["error"]
    assert "INVALID" in corral("machines").out


def test_png_needs_an_output_file(corral: Any) -> None:
    run = corral("draw", "controller", "--format", "png", "--json")
    assert (run.code, run.json()["error"]["details"]["field"]) == (3, "out")


def test_events_follow_prints_new_events_as_they_are_appended(
    corral: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    assert acquire(corral).code == 0
    follower = subprocess.Popen(
        [str(Path(sys.executable).parent / "corral"), "events", "--follow", "--json"],
        stdout=subprocess.PIPE, text=True, env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        first = json.loads(follower.stdout.readline())
        assert first["trigger"] == "acquire"
        assert corral("controller", "renew", "--controller", "ctl").code == 0
        second = json.loads(follower.stdout.readline())  # blocks until the follower sees the renew
        assert (second["trigger"], second["seq"]) == ("renew", first["seq"] + 1)
    finally:
        follower.kill()
        follower.communicate()


def hostile_files(tmp_path: Path) -> dict[str, Path]:
    """A plan with a 5,000-digit integer, a machine with ``!!binary`` in a guard's ``with``, a plan
    that is not UTF-8: each crashed ``corral validate`` or ``corral run`` with exit 1 before."""
    root = Path(__file__).resolve().parents[2]
    plan = (root / "recipes" / "examples" / "review.yaml").read_text()
    machine = (root / "machines" / "controller.yaml").read_text()
    files = {
        "bigint.yaml": plan.replace("timeout: 600", "timeout: " + "9" * 5000).encode(),
        "binary.yaml": machine.replace("with: {allow_expired: true}", "with: {allow_expired: !!binary aGk=}").encode(),
        "latin.yaml": plan.replace("obvious", "obvi\u00e9us").encode("latin-1"),
    }
    paths = {}
    for name, raw in files.items():
        paths[name] = tmp_path / name
        paths[name].write_bytes(raw)
    return paths


def test_validate_gives_each_hostile_file_its_own_verdict(corral: Any, tmp_path: Path) -> None:
    paths = hostile_files(tmp_path)
    good = Path(__file__).resolve().parents[2] / "machines" / "reviewer.yaml"
    run = corral("validate", *map(str, paths.values()), str(good), "--json")
    assert run.code == 3, run.out + run.err
    files = {Path(f["path"]).name: f for f in run.json()["files"]}
    assert files["reviewer.yaml"]["ok"] is True
    verdicts = {name: (f["ok"], [(d["code"], d["line"]) for d in f["diagnostics"]]) for name, f in files.items()}
    assert verdicts["bigint.yaml"] == (False, [("spec_unsupported_value", 12)])
    assert verdicts["binary.yaml"] == (False, [("spec_unsupported_value", 42)])
    assert verdicts["latin.yaml"] == (False, [("spec_encoding", 9)])
    text = corral("validate", *map(str, paths.values()), str(good))
    assert text.code == 3 and "4 file(s): 3 failed" in text.out


def test_a_bug_on_one_file_is_that_files_verdict_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli.app import main
    from runner.definitions import library

    root = Path(__file__).resolve().parents[2] / "machines"
    real = library.validate_file

    def buggy(path: Path, *rest: Any) -> Any:
        if path.name == "receipt.yaml":
            raise RuntimeError("simulated bug")
        return real(path, *rest)

    monkeypatch.setattr(library, "validate_file", buggy)
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    status = main(["validate", str(root / "receipt.yaml"), str(root / "reviewer.yaml"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 1
    verdicts = {Path(f["path"]).name: (f["ok"], [d["code"] for d in f["diagnostics"]]) for f in doc["files"]}
    assert verdicts == {"receipt.yaml": (False, ["internal"]), "reviewer.yaml": (True, [])}


def test_run_refuses_hostile_plans_with_exit_3_and_writes_nothing(corral: Any, tmp_path: Path, home: Path) -> None:
    paths = hostile_files(tmp_path)
    for name, code in (("bigint.yaml", "spec_unsupported_value"), ("latin.yaml", "spec_encoding")):
        run = corral("run", str(paths[name]), "--json")
        assert run.code == 3, run.out + run.err
        assert run.json()["error"]["code"] == code
        assert run.json()["error"]["details"]["diagnostics"][0]["path"] == str(paths[name])
    assert not (home / "corral.db").exists(), "a refused plan opens no store"


def test_machines_and_draw_refuse_a_local_machine_holding_binary(corral: Any, tmp_path: Path) -> None:
    machines = tmp_path / "machines"
    machines.mkdir()
    binary = hostile_files(tmp_path)["binary.yaml"]
    (machines / "custom.yaml").write_bytes(binary.read_bytes().replace(b"machine: controller", b"machine: custom"))
    found = corral("machines", "--json")
    assert found.code == 0, found.out + found.err
    rows = {m["name"]: m for m in found.json()["machines"]}
    assert "spec_unsupported_value" in rows["custom"]["error"]
    drawn = corral("draw", "custom", "--json")
    assert (drawn.code, drawn.json()["error"]["code"]) == (3, "spec_unsupported_value")

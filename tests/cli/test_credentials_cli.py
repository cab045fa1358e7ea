"""Credential files through the real ``corral`` executable: races, crashes, hostile files, process binding.

Every case runs real processes against a real SQLite store in a fresh state home. Races and crashes
use the test-only fault points of :mod:`runner.faults` (honoured only with ``CORRAL_TEST_FAULTS=1``).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.runs import Run

SHA = "c" * 64
CORRAL = str(Path(sys.executable).parent / "corral")
ACQUIRE = ["controller", "acquire", "--controller", "ctl", "--authority-ref", "T-1", "--authority-sha256", SHA]
RENEW = ["controller", "renew", "--controller", "ctl", "--json"]
RELEASE = ["controller", "release", "--controller", "ctl", "--checkpoint-ref", "c", "--checkpoint-sha256", SHA]


@pytest.fixture
def corral(cli_env: dict[str, str], tmp_path: Path) -> Any:
    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> Run:
        proc = subprocess.run(
            [CORRAL, *args],
            capture_output=True,
            text=True,
            env=env or cli_env,
            cwd=tmp_path,
            timeout=timeout,
            check=False,
        )
        return Run(proc)

    return run


def faulty(cli_env: dict[str, str], **faults: str) -> dict[str, str]:
    env = {**cli_env, "CORRAL_TEST_FAULTS": "1"}
    env.update({f"CORRAL_FAULT_{name.upper()}": action for name, action in faults.items()})
    return env


def wait_for(path: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def lease_of(corral: Any) -> dict[str, Any]:
    (lease,) = corral("controller", "list", "--json").json()["leases"]
    return dict(lease)


# --- 1. release vs. a successor's acquire; crashes around the grant -----------------------------------


@pytest.mark.timeout(90)
def test_a_slow_release_keeps_the_credential_its_successor_wrote(
    corral: Any, cli_env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    assert corral(*ACQUIRE, "--json").code == 0
    gate = tmp_path / "gate"
    release = subprocess.Popen(
        [CORRAL, *RELEASE, "--json"],
        env=faulty(cli_env, release_before_discard=f"pause:{gate}"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(Path(f"{gate}.reached"))  # the release committed and has not removed its file yet
        successor = corral(*ACQUIRE, "--json")
        assert successor.code == 0, successor.out + successor.err
        assert successor.json()["lease"]["generation"] == 2
    finally:
        gate.touch()
        out, err = release.communicate(timeout=60)
    assert release.returncode == 0, out + err
    assert (home / "credentials" / "ctl.json").exists(), "the release deleted its successor's credential"
    renewed = corral(*RENEW)
    assert renewed.code == 0, renewed.out
    assert renewed.json()["lease"]["generation"] == 2


@pytest.mark.timeout(60)
def test_acquire_killed_after_the_grant_commits_left_a_working_credential(
    corral: Any, cli_env: dict[str, str], home: Path
) -> None:
    killed = corral(*ACQUIRE, "--json", env=faulty(cli_env, credential_after_grant="kill"))
    assert killed.code == -9, "the fault point killed the acquire between its grant and saving the credential"
    assert lease_of(corral)["state"] == "active", "the grant had committed"
    renewed = corral(*RENEW)
    assert renewed.code == 0, renewed.out
    assert renewed.json()["lease"]["generation"] == 1


@pytest.mark.timeout(60)
def test_resume_killed_either_side_of_its_grant_loses_nothing(corral: Any, cli_env: dict[str, str], home: Path) -> None:
    assert corral(*ACQUIRE, "--json").code == 0
    resume = ["controller", "resume", "--controller", "ctl", "--json"]
    before = corral(*resume, env=faulty(cli_env, credential_before_grant="kill"))
    assert before.code == -9
    assert lease_of(corral)["generation"] == 1, "the grant did not happen"
    assert json.loads((home / "credentials" / "ctl.json").read_text())["pending"] is True
    renewed = corral(*RENEW)
    assert renewed.code == 0, f"the previous credential is still in the file and in force: {renewed.out}"

    after = corral(*resume, env=faulty(cli_env, credential_after_grant="kill"))
    assert after.code == -9
    assert lease_of(corral)["generation"] == 2, "the grant happened"
    renewed = corral(*RENEW)
    assert renewed.code == 0, f"the proposal saved first holds the new grant: {renewed.out}"
    assert renewed.json()["lease"]["generation"] == 2
    released = corral(*RELEASE, "--json")
    assert released.code == 0, released.out
    assert not (home / "credentials" / "ctl.json").exists(), "release removes the (settled) pending file"


@pytest.mark.timeout(60)
def test_an_acquire_that_died_before_its_grant_is_not_a_dead_end(corral: Any, cli_env: dict[str, str]) -> None:
    died = corral(*ACQUIRE, "--json", env=faulty(cli_env, credential_before_grant="kill"))
    assert died.code == -9
    stale = corral(*RENEW)
    assert stale.code == 3 and stale.error_code() == "controller_unknown", "the proposal grants nothing"
    again = corral(*ACQUIRE, "--json")
    assert again.code == 0, again.out
    assert corral(*RENEW).code == 0


def test_a_refused_acquire_leaves_the_holders_credential_alone(corral: Any, home: Path) -> None:
    assert corral(*ACQUIRE, "--json").code == 0
    before = (home / "credentials" / "ctl.json").read_bytes()
    held = corral(*ACQUIRE, "--json")
    assert held.code == 4 and held.error_code() == "lease_held"
    assert (home / "credentials" / "ctl.json").read_bytes() == before
    assert corral(*RENEW).code == 0


# --- 2. hostile or malformed credential files ---------------------------------------------------------


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def _self_loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)


def _symlink_to_good_copy(path: Path) -> None:
    copy = path.with_name("elsewhere.json")
    copy.write_bytes(path.read_bytes())
    copy.chmod(0o600)
    path.unlink()
    path.symlink_to(copy.name)


def _edit(**changes: Any) -> Any:
    def apply(path: Path) -> None:
        doc = json.loads(path.read_text())
        doc.update(changes)
        path.write_text(json.dumps(doc))

    return apply


def _deep(path: Path) -> None:
    path.write_text("[" * 30000 + "]" * 30000)


def _huge(path: Path) -> None:
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc) + " " * (70 * 1024))


HOSTILE = {
    "fifo": (_fifo, "credential_insecure"),
    "self-loop-symlink": (_self_loop, "credential_insecure"),
    "symlink-to-a-good-copy": (_symlink_to_good_copy, "credential_insecure"),
    "mode-0400": (lambda p: p.chmod(0o400), "credential_insecure"),
    "mode-0640": (lambda p: p.chmod(0o640), "credential_insecure"),
    "deeply-nested-json": (_deep, "credential_corrupt"),
    "over-64-kib": (_huge, "credential_corrupt"),
    "format-true": (_edit(format=True), "credential_corrupt"),
    "format-string": (_edit(format="1"), "credential_corrupt"),
    "generation-true": (_edit(generation=True), "credential_corrupt"),
    "token-not-hex": (_edit(token="Z" * 32), "credential_corrupt"),
    "lease-id-not-uuid": (_edit(lease_id="x"), "credential_corrupt"),
    "unknown-key": (_edit(extra=1), "credential_corrupt"),
    "bad-binding": (_edit(binding={"pid": True}), "credential_corrupt"),
    "not-utf8": (lambda p: p.write_bytes(b"\xff\xfe{}"), "credential_corrupt"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_renew_refuses_a_hostile_credential_file(corral: Any, home: Path, case: str) -> None:
    assert corral(*ACQUIRE, "--json").code == 0
    path = home / "credentials" / "ctl.json"
    damage, code = HOSTILE[case]
    damage(path)
    try:
        refused = corral(*RENEW, timeout=20)  # a FIFO once made renew hang here
    finally:
        path.parent.chmod(0o700)
    assert refused.code == 3, refused.out + refused.err
    error = refused.json()["error"]
    assert error["code"] == code, error
    assert str(path.parent) in error["message"]
    assert "Traceback" not in refused.err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [0o777, 0o750])
def test_a_loose_credentials_directory_is_tightened_never_used_as_it_is(corral: Any, home: Path, mode: int) -> None:
    """The state home's own check tightens a loose ``credentials/`` of ours before anything reads it
    (the loader itself refuses a loose directory it is handed any other way: tests/test_credentials.py)."""
    assert corral(*ACQUIRE, "--json").code == 0
    directory = home / "credentials"
    directory.chmod(mode)
    renewed = corral(*RENEW)
    assert renewed.code == 0, renewed.out + renewed.err
    assert directory.stat().st_mode & 0o777 == 0o700
    assert "tightening" in renewed.err


@pytest.mark.timeout(60)
def test_acquire_never_writes_through_a_symlink(corral: Any, home: Path, tmp_path: Path) -> None:
    (home / "credentials").mkdir(parents=True, mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (home / "credentials" / "ctl.json").symlink_to(victim)
    refused = corral(*ACQUIRE, "--json")
    assert refused.code == 3 and refused.error_code() == "credential_insecure", refused.out
    assert victim.read_text() == "precious\n"
    assert corral("controller", "list", "--json").json()["leases"] == [], "nothing was granted"


def test_written_files_are_0600_whatever_the_umask(corral: Any, cli_env: dict[str, str], home: Path) -> None:
    proc = subprocess.run(
        ["sh", "-c", f"umask 000 && exec {CORRAL} {' '.join(ACQUIRE)} --json"],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = home / "credentials" / "ctl.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


# --- 4. --bind-process --------------------------------------------------------------------------------


def sh(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a short-lived shell: the coordinator process that binds a credential."""
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.timeout(90)
def test_a_bound_credential_works_inside_its_lineage_only(corral: Any, cli_env: dict[str, str], home: Path) -> None:
    inside = sh(
        f"{CORRAL} {' '.join(ACQUIRE)} --bind-process --json >/dev/null || exit 9\n"
        f"{CORRAL} {' '.join(RENEW)} || exit 10\n"
        f"sh -c '{CORRAL} {' '.join(RENEW)}' || exit 11\n",  # a grandchild of the binding shell
        cli_env,
    )
    assert inside.returncode == 0, inside.stdout + inside.stderr
    binding = json.loads((home / "credentials" / "ctl.json").read_text())["binding"]
    assert set(binding) == {"boot_id", "pid", "start_time"}
    # The binding shell has exited: the test process is not it nor its descendant.
    for args in (RENEW, ["controller", "resume", "--controller", "ctl", "--json"], [*RELEASE, "--json"]):
        refused = corral(*args)
        assert refused.code == 4, refused.out
        assert refused.error_code() == "caller_not_controller"
    assert corral("controller", "list", "--json").json()["leases"][0]["state"] == "active"
    assert (home / "credentials" / "ctl.json").exists()


@pytest.mark.timeout(90)
def test_agent_commands_are_refused_outside_the_lineage(corral: Any, cli_env: dict[str, str], tmp_path: Path) -> None:
    assert sh(f"{CORRAL} {' '.join(ACQUIRE)} --bind-process --json", cli_env).returncode == 0
    start = corral(
        "reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "script", "--cwd", str(tmp_path),
        "--json",
    )  # fmt: skip
    assert start.code == 4 and start.error_code() == "caller_not_controller", start.out
    assert corral("reviewer", "list", "--all", "--json").json()["reviewers"] == []


@pytest.mark.timeout(90)
def test_a_bound_herdr_pane_must_match(cli_env: dict[str, str]) -> None:
    pane_a = {**cli_env, "HERDR_PANE_ID": "pane-a"}
    script = f"{CORRAL} {' '.join(ACQUIRE)} --bind-process --json >/dev/null || exit 9\n"
    script += f"HERDR_PANE_ID=pane-b {CORRAL} {' '.join(RENEW)} >out-b; echo $? >rc-b\n"
    script += f"{CORRAL} {' '.join(RENEW)} || exit 10\n"
    done = subprocess.run(
        ["sh", "-c", script],
        env=pane_a,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(cli_env["CORRAL_HOME"]).parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    where = Path(cli_env["CORRAL_HOME"]).parent
    assert (where / "rc-b").read_text().strip() == "4"
    assert json.loads((where / "out-b").read_text())["error"]["code"] == "caller_not_controller"


@pytest.mark.timeout(90)
def test_resume_keeps_the_binding_unless_rebound(corral: Any, cli_env: dict[str, str], home: Path) -> None:
    resume = ["controller", "resume", "--controller", "ctl", "--json"]
    made = sh(
        f"{CORRAL} {' '.join(ACQUIRE)} --bind-process --json >/dev/null || exit 9\n"
        f"{CORRAL} {' '.join(resume)} >/dev/null || exit 10\n",
        cli_env,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert "binding" in json.loads((home / "credentials" / "ctl.json").read_text()), "a resume keeps the binding"
    assert corral(*RENEW).code == 4


def test_an_unbound_credential_works_from_anywhere(corral: Any, cli_env: dict[str, str]) -> None:
    assert sh(f"{CORRAL} {' '.join(ACQUIRE)} --json", cli_env).returncode == 0
    assert corral(*RENEW).code == 0

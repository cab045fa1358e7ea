"""The transition-coverage plugin, run by a real pytest in a subprocess on a tiny project that loads it.

The project's one test file drives the controller machine through the real service; the plugin must
then fail the whole-suite run with the edges it never saw, report without failing when told to, and
stay quiet (one line) on partial runs; and do all of that the same when ``pytest-xdist`` spreads the
tests over worker processes (``-p xdist -n 2``): the workers record, the controller judges.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test runs pytest itself in a subprocess

TEST_FILE = """
from runner.errors import RefusedError
from runner.fence import Credential
from runner.service import AcquireInput, RenewInput, Service
from runner.definitions.library import Library
from runner.sql.store_sqlite import SQLiteStore


def test_acquire_and_a_refused_renew(tmp_path):
    with SQLiteStore(tmp_path / "corral.db") as store:
        service = Service(store, Library(cache_dir=tmp_path / "cache"), actor="test")
        grant = service.controller.acquire(AcquireInput("ctl", "T-1", "a" * 64, 60, "t@h"))
        forged = Credential("ctl", grant.credential.lease_id, grant.credential.generation, "0" * 32)
        try:
            service.controller.renew(RenewInput("ctl", forged))
        except RefusedError:
            pass
        else:
            raise AssertionError("a forged token renewed the lease")


def test_nothing():
    pass
"""

# A second file, so that two xdist workers both get tests: its test exercises another edge, which the
# controller must have merged in from whichever worker ran it.
RELEASE_FILE = """
from runner.service import AcquireInput, ReleaseInput, Service
from runner.definitions.library import Library
from runner.sql.store_sqlite import SQLiteStore

def test_acquire_and_release(tmp_path):
    with SQLiteStore(tmp_path / "corral.db") as store:
        service = Service(store, Library(cache_dir=tmp_path / "cache"), actor="test")
        grant = service.controller.acquire(AcquireInput("ctl2", "T-2", "b" * 64, 60, "t@h"))
        service.controller.release(ReleaseInput("ctl2", grant.credential, "refs/heads/done", "c" * 64))
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "t").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = t\naddopts = -p no:cacheprovider\n")
    (root / "t" / "conftest.py").write_text('pytest_plugins = ["tests.plugins.transitions"]\n')
    (root / "t" / "test_one.py").write_text(textwrap.dedent(TEST_FILE))
    return root


@pytest.fixture
def parallel_project(project: Path) -> Path:
    """The project with a second test file, so that each of two xdist workers runs tests."""
    (project / "t" / "test_release.py").write_text(textwrap.dedent(RELEASE_FILE))
    return project


XDIST = ("-p", "xdist", "-n", "2", "--dist", "loadfile", "-vv")  # (-q -vv: one line per test)


def run(project: Path, *args: str, mode: str | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "PYTEST_"))}
    env["CORRAL_HOME"] = str(project / "home")
    if mode is not None:
        env["CORRAL_TRANSITION_COVERAGE"] = mode
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def builtin_edges() -> int:
    """Every transition edge of every built-in machine (what a whole run must exercise)."""
    from runner.definitions.library import Library
    from runner.modelpaths.paths import list_targets

    library = Library()
    return sum(len(list_targets(library.builtin(p.stem)).transitions) for p in library.builtin_paths())


def test_a_whole_run_with_missing_edges_fails_and_lists_them(project: Path) -> None:
    code, out = run(project)
    assert code == 1, out
    assert "2 passed" in out
    assert f"transition coverage (whole suite): 1/{builtin_edges()} transition edges exercised" in out
    assert "transition edge(s) FAILED, never exercised:" in out
    missing = [line.strip() for line in out.splitlines() if line.startswith("  controller: ")]
    assert "controller: t1 renew active->active" in missing
    assert "controller: t0 acquire absent->active" not in missing, "the edge the test exercised"
    assert "plan: t0 submit absent->submitted" in out and "writer: t7 reconcile active->released" in out
    assert "CORRAL_TRANSITION_COVERAGE=report" in out
    refusals = next(line for line in out.splitlines() if line.strip().startswith("controller:") and "refused" in line)
    assert "t1 renew fence" not in refusals, "the refused renew was recorded"
    assert "t4 release fence" in refusals


def test_report_mode_never_fails(project: Path) -> None:
    code, out = run(project, mode="report")
    assert code == 0, out
    assert "never exercised (report only):" in out and "controller: t1 renew active->active" in out


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("-k", "nothing"), "1 test(s) deselected"),
        (("t/test_one.py::test_nothing",), "test ids given"),
        (("-x", "--collect-only"), "collect-only run"),
    ],
)
def test_partial_runs_are_not_checked(project: Path, args: tuple[str, ...], reason: str) -> None:
    code, out = run(project, *args)
    assert code == 0, out
    assert f"transition coverage not checked: {reason}" in out
    assert "never exercised" not in out


def test_a_file_left_out_makes_the_run_partial(project: Path) -> None:
    (project / "t" / "test_two.py").write_text("def test_two():\n    pass\n")
    code, out = run(project, "t/test_one.py")
    assert code == 0, out
    assert "transition coverage not checked: 1 test file(s) not collected (t/test_two.py)" in out


def test_off_records_nothing(project: Path) -> None:
    code, out = run(project, mode="off")
    assert code == 0, out
    assert "transition coverage" not in out


def test_an_unknown_mode_is_a_usage_error(project: Path) -> None:
    code, out = run(project, mode="sometimes")
    assert code == 4, out
    assert "CORRAL_TRANSITION_COVERAGE='sometimes'" in out


def test_a_parallel_whole_run_merges_the_workers_and_still_fails_on_a_missing_edge(parallel_project: Path) -> None:
    code, out = run(parallel_project, *XDIST)
    assert code == 1, out
    assert "3 passed" in out
    workers = {line.split("]")[0] for line in out.splitlines() if line.startswith("[gw") and "PASSED" in line}
    assert workers == {"[gw0", "[gw1"}, f"each worker ran tests: {out}"
    assert f"transition coverage (whole suite): 2/{builtin_edges()} transition edges exercised" in out
    missing = [line.strip() for line in out.splitlines() if line.startswith("  controller: ")]
    assert "controller: t1 renew active->active" in missing
    assert "controller: t0 acquire absent->active" not in missing
    assert "controller: t4 release active->released" not in missing, "the other worker's edge was merged"
    assert "transition edge(s) FAILED, never exercised:" in out
    refusals = next(line for line in out.splitlines() if line.strip().startswith("controller:") and "refused" in line)
    assert "t1 renew fence" not in refusals, "a worker's guard refusal was merged"
    assert out.count("transition coverage (whole suite)") == 1, "only the controller judges"


def test_a_parallel_run_in_report_mode_never_fails(parallel_project: Path) -> None:
    code, out = run(parallel_project, *XDIST, mode="report")
    assert code == 0, out
    assert f"transition coverage (whole suite): 2/{builtin_edges()} transition edges exercised" in out
    assert "never exercised (report only):" in out


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("-k", "nothing"), "2 test(s) deselected"),
        (("t/test_one.py",), "1 test file(s) not collected (t/test_release.py)"),
    ],
)
def test_a_partial_parallel_run_is_not_checked(parallel_project: Path, args: tuple[str, ...], reason: str) -> None:
    code, out = run(parallel_project, *XDIST, *args)
    assert code == 0, out
    assert f"transition coverage not checked: {reason}" in out
    assert "never exercised" not in out

"""``writer verify`` end to end: a real repository, a real lane, real SQLite, real Bubblewrap.

The repository declares its validations in ``.corral/validate.yaml`` at the lane's base commit: one
check that every Python file of the snapshot compiles (and prints which it saw: tracked and untracked
files, never ignored ones) and one that fails when a file still carries a to-do marker. Verify must
record statuses, durations and digests on the lane and in the event log (never output), return the
tails only to the caller, read the checks at the base commit (not the worktree), leave the worktree
exactly as it was, and discard a result when the controller's fence changed while it ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner import credentials
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.definitions.library import Library
from runner.errors import CorralError, InputError, RefusedError, SpecError
from runner.fence import Credential
from runner.service import AcquireInput, Service, VerifyResult, WriterStartInput, WriterVerifyInput
from runner.sql.store_sqlite import SQLiteStore

SHA = "d" * 64

VALIDATE = """\
# yaml-language-server: $schema=../schemas/validate.schema.json
validations:
  - name: compiles
    description: every Python file of the snapshot compiles
    argv:
      - python3
      - -c
      - |
        import pathlib
        files = sorted(str(p) for p in pathlib.Path('.').rglob('*.py'))
        for name in files:
            compile(pathlib.Path(name).read_text(), name, 'exec')
        print('compiled', len(files), 'files:', ' '.join(files))
  - name: no-todo
    argv:
      - python3
      - -c
      - |
        import pathlib, sys
        marker = 'TO' + 'DO'
        hits = sorted(str(p) for p in pathlib.Path('.').rglob('*.py') if marker in p.read_text())
        for hit in hits:
            print('a marker is left in', hit)
        sys.exit(3 if hits else 0)
    timeout: 60
"""
# What the two checks print over the lane's snapshot (app.py, lib/util.py tracked; notes.py untracked).
COMPILES_OUTPUT = "compiled 3 files: app.py lib/util.py notes.py\n"
NO_TODO_OUTPUT = "a marker is left in notes.py\n"

# Waits (at most 30 s) for the test to create `go` in the snapshot (the host side of its read-only
# bind): a run the test can hold open while it changes the fence. Nothing written inside reaches the host.
SLOW = """\
validations:
  - name: slow
    argv:
      - python3
      - -c
      - |
        import pathlib, time
        deadline = time.monotonic() + 30
        while not pathlib.Path('go').exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        print('slow check done')
"""

RESUME = r"""
import sys
from pathlib import Path
from runner import credentials
from runner.service import ResumeInput, Service
from runner.definitions.library import Library
from runner.sql.store_sqlite import SQLiteStore

db, cache, path = sys.argv[1:4]
with SQLiteStore(db) as store:
    old = credentials.load(Path(path), "ctl", store.url)
    grant = Service(store, Library(cache_dir=Path(cache)), actor="other").controller.resume(ResumeInput("ctl", old))
    credentials.save(Path(path), grant.credential, store.url)
"""


def _require_bwrap() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get("CI"):
            pytest.fail("bwrap is not installed; under CI the sandbox tests must run: apt-get install bubblewrap")
        pytest.skip("bwrap is not installed (apt-get install bubblewrap); under CI this is a failure, not a skip")


def git(*args: str, cwd: Path) -> str:  # keyword cwd: argv reads first here
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


class World:
    """A real store (wall clock), a real process host, a service, a controller lease and a repository."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = SQLiteStore(root / "corral.db")
        self.kinds = Kinds.load([])
        self.host = ProcessHost(self.store, root / "agents", self.kinds)
        self.cache = root / "cache"
        self.service = Service(
            self.store, Library(cache_dir=self.cache), actor="test", hosts=lambda name: self.host, kinds=self.kinds
        )
        self.credential = self.service.controller.acquire(AcquireInput("ctl", "T-7", SHA, 900, "t@h")).credential
        # Reachable by other users (0711 down from /): as root the sandbox's own uid must open the snapshot.
        self.scratch = Path(tempfile.mkdtemp(prefix="corral-scratch-"))
        os.chmod(self.scratch, 0o711)
        self.main = root / "main"
        self.main.mkdir()
        git("init", "-q", "-b", "main", cwd=self.main)
        git("config", "user.email", "verify@example.invalid", cwd=self.main)
        git("config", "user.name", "verify", cwd=self.main)

    def commit(self, files: dict[str, str], cwd: Path | None = None) -> str:
        where = cwd or self.main
        for relative, text in files.items():
            path = where / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git("add", "-A", cwd=where)
        git("commit", "-q", "-m", "change", cwd=where)
        return git("rev-parse", "HEAD", cwd=where)

    def lane(self, base: str, name: str = "w1", setup: Callable[[Path], None] | None = None) -> tuple[Path, str]:
        """A linked worktree on branch ``lane-<name>`` at ``base``, prepared by ``setup``, with a lane in it."""
        worktree = self.root / f"wt-{name}"
        git("worktree", "add", "-q", "-b", f"lane-{name}", str(worktree), base, cwd=self.main)
        if setup is not None:
            setup(worktree)
        facts = self.service.writers.preflight(str(worktree))
        view = self.service.writers.start(
            WriterStartInput(
                "ctl",
                self.credential,
                name,
                "script",
                str(worktree),
                f"lane-{name}",
                base,
                facts["head"],
                facts["status_sha256"],
                (f"src/{name}",),
                "verify",
                "T-7",
                "AUTH-7",
                SHA,
            )
        )
        assert view.state == "active"
        return worktree, view.id

    def verify(self, name: str = "w1", tails: bool = False, credential: Credential | None = None) -> VerifyResult:
        inp = WriterVerifyInput("ctl", credential or self.credential, name, tails)
        return self.service.writers.verify(inp, scratch=self.scratch)

    def lane_data(self, lane_id: str) -> tuple[int, dict[str, Any]]:
        instance = self.store.get(lane_id)
        assert instance is not None
        return instance.version, dict(instance.data)

    def events_json(self) -> str:
        return json.dumps([e.to_dict() for e in self.store.events()])


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    _require_bwrap()
    w = World(tmp_path)
    yield w
    w.store.close()
    shutil.rmtree(w.scratch, ignore_errors=True)


BASE_FILES = {
    ".corral/validate.yaml": VALIDATE,
    ".gitignore": "build/\n",
    "app.py": "from lib.util import twice\nprint(twice(2))\n",
    "lib/util.py": "def twice(x):\n    return 2 * x\n",
    "README.md": "a repository with validations\n",
}


def _untracked_and_ignored(worktree: Path) -> None:
    (worktree / "notes.py").write_text("# TODO: finish\nvalue = 1\n")  # untracked: in the snapshot
    (worktree / "build").mkdir()
    (worktree / "build" / "junk.py").write_text("this is not python (\n")  # ignored: not in the snapshot
    (worktree / "link").symlink_to("/etc/hostname")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """Everything under ``root``, byte for byte: kind, mode, mtime, size and content digest of each entry."""
    found: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            info = os.lstat(path)
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[key] = ("dir", info.st_mode, info.st_mtime_ns)
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[key] = ("file", info.st_mode, info.st_mtime_ns, info.st_size, digest)
    info = os.lstat(root)
    found["."] = ("dir", info.st_mode, info.st_mtime_ns)
    return found


def refused(code: str, call: Callable[[], Any]) -> CorralError:
    with pytest.raises(CorralError) as caught:
        call()
    assert caught.value.code == code, caught.value.to_dict()
    return caught.value


# --- what is recorded ------------------------------------------------------------------------------


def test_verify_records_statuses_and_digests_on_the_lane_and_in_the_log(world: World) -> None:
    base = world.commit(BASE_FILES)
    worktree, lane_id = world.lane(base, setup=_untracked_and_ignored)
    facts = world.service.writers.preflight(str(worktree))
    version_before, _ = world.lane_data(lane_id)
    last_seq = world.store.events()[-1].seq

    result = world.verify()

    v = result.verification
    assert v["passed"] is False
    assert (v["head"], v["status_sha256"]) == (facts["head"], facts["status_sha256"])
    assert (v["base_commit"], v["fence_generation"]) == (base, world.credential.generation)
    assert isinstance(v["duration_seconds"], float) and v["duration_seconds"] > 0
    compiles, no_todo = v["results"]
    assert (compiles["name"], compiles["exit_status"], compiles["passed"], compiles["timed_out"]) == (
        "compiles",
        0,
        True,
        False,
    )
    assert (no_todo["name"], no_todo["exit_status"], no_todo["passed"], no_todo["timed_out"]) == (
        "no-todo",
        3,
        False,
        False,
    )
    # The digests prove what ran over what: tracked and untracked files, not the ignored one.
    assert (compiles["output_sha256"], compiles["output_bytes"]) == (_sha(COMPILES_OUTPUT), len(COMPILES_OUTPUT))
    assert (no_todo["output_sha256"], no_todo["output_bytes"]) == (_sha(NO_TODO_OUTPUT), len(NO_TODO_OUTPUT))
    for record in v["results"]:
        assert 0 < record["duration_seconds"] <= v["duration_seconds"]
        assert record["argv"][:2] == ["python3", "-c"]
    assert result.tails == {}, "tails only when asked for"

    # Recorded on the lane, one version later, still active.
    version, data = world.lane_data(lane_id)
    assert version == version_before + 1
    assert data["verification"] == v and data["verified_at"]
    assert result.lease.state == "active" and result.lease.data["verification"] == v
    # One verify event, with the verification and without any output.
    (event,) = [e for e in world.store.events() if e.seq > last_seq]
    assert (event.instance_id, event.trigger) == (lane_id, "verify")
    assert (event.from_state, event.to_state) == ("active", "active")
    assert event.payload["changed"]["verification"] == v
    text = world.events_json()
    for output in (COMPILES_OUTPUT.strip(), NO_TODO_OUTPUT.strip()):  # (the argv is recorded, the output never)
        assert output not in text, f"output in the event log: {output!r}"
    assert list(world.scratch.iterdir()) == [], "the snapshot and home were removed"


def test_a_passing_run_is_recorded_passed(world: World) -> None:
    base = world.commit(BASE_FILES)
    _, lane_id = world.lane(base)  # no untracked notes.py: nothing to flag
    v = world.verify().verification
    assert v["passed"] is True
    assert [(r["name"], r["exit_status"], r["passed"]) for r in v["results"]] == [
        ("compiles", 0, True),
        ("no-todo", 0, True),
    ]
    assert v["results"][0]["output_sha256"] == _sha("compiled 2 files: app.py lib/util.py\n")
    assert world.lane_data(lane_id)[1]["verification"]["passed"] is True


def test_tails_are_returned_but_never_recorded(world: World) -> None:
    base = world.commit(BASE_FILES)
    _, lane_id = world.lane(base, setup=_untracked_and_ignored)
    result = world.verify(tails=True)
    assert result.tails == {"compiles": COMPILES_OUTPUT, "no-todo": NO_TODO_OUTPUT}
    assert result.to_dict()["tails"] == result.tails
    _, data = world.lane_data(lane_id)
    assert "tails" not in json.dumps(data["verification"])
    stored = json.dumps(data) + world.events_json()
    outputs = (COMPILES_OUTPUT.strip(), NO_TODO_OUTPUT.strip())
    assert not [o for o in outputs if o in stored]
    world.store.close()
    for path in world.root.glob("corral.db*"):  # nor anywhere in the database files
        raw = path.read_bytes()
        assert not [o for o in outputs if o.encode() in raw], path.name
    world.store = SQLiteStore(world.root / "corral.db")


# --- what runs ------------------------------------------------------------------------------------

SNEAKY = """\
validations:
  - name: sneaky
    argv: [python3, -c, "print('all good, trust me')"]
"""


def test_validations_are_read_at_the_base_commit_not_from_the_worktree(world: World) -> None:
    base = world.commit(BASE_FILES)

    def rewrite_checks(worktree: Path) -> None:
        _untracked_and_ignored(worktree)
        (worktree / ".corral" / "validate.yaml").write_text(SNEAKY)

    worktree, lane_id = world.lane(base, setup=rewrite_checks)
    names = [r["name"] for r in world.verify().verification["results"]]
    assert names == ["compiles", "no-todo"], "the lane's own edit of validate.yaml decided what ran"

    # Committing the edit on the lane's branch moves HEAD, not the base: still the base's checks.
    head = world.commit({".corral/validate.yaml": SNEAKY}, cwd=worktree)
    v = world.verify().verification
    assert v["head"] == head and v["base_commit"] == base
    assert [r["name"] for r in v["results"]] == ["compiles", "no-todo"] and v["passed"] is False
    assert world.lane_data(lane_id)[1]["verification"] == v


def test_the_base_commit_decides_even_when_another_lane_starts_later(world: World) -> None:
    """Control for the test above: a lane based on the commit with other checks runs those."""
    first = world.commit(BASE_FILES)
    second = world.commit({".corral/validate.yaml": SNEAKY})
    world.lane(first, name="w1")
    world.lane(second, name="w2")
    assert [r["name"] for r in world.verify("w1").verification["results"]] == ["compiles", "no-todo"]
    assert [r["name"] for r in world.verify("w2").verification["results"]] == ["sneaky"]


def test_verify_leaves_the_worktree_byte_for_byte_unchanged(world: World) -> None:
    base = world.commit(
        {
            **BASE_FILES,
            ".corral/validate.yaml": VALIDATE
            + """\
  - name: vandal
    argv:
      - python3
      - -c
      - |
        import pathlib
        for target in ('app.py', 'new.py', '.git', 'lib/util.py'):
            try:
                pathlib.Path(target).write_text('vandalised')
            except OSError as exc:
                print(target, 'refused', exc.errno)
        print('done')
""",
        }
    )
    worktree, _ = world.lane(base, setup=_untracked_and_ignored)
    (worktree / "app.py").chmod(0o640)
    os.utime(worktree / "lib" / "util.py", ns=(1_000_000_000, 1_000_000_000))
    before_tree = _tree(worktree)
    before_git = world.service.writers.preflight(str(worktree))
    v = world.verify(tails=True)
    assert v.tails["vandal"].count("refused") == 4, v.tails["vandal"]
    assert _tree(worktree) == before_tree
    after_git = world.service.writers.preflight(str(worktree))
    assert (after_git["head"], after_git["status_sha256"]) == (before_git["head"], before_git["status_sha256"])


# --- refusals -------------------------------------------------------------------------------------


def test_no_config_at_the_base_commit_is_validation_missing(world: World) -> None:
    files = {k: v for k, v in BASE_FILES.items() if k != ".corral/validate.yaml"}
    base = world.commit(files)

    def add_config_in_the_worktree(worktree: Path) -> None:  # not at the base commit: does not count
        (worktree / ".corral").mkdir()
        (worktree / ".corral" / "validate.yaml").write_text(VALIDATE)

    _, lane_id = world.lane(base, setup=add_config_in_the_worktree)
    before = world.lane_data(lane_id)
    events = world.events_json()
    error = refused("validation_missing", world.verify)
    assert isinstance(error, InputError)
    assert error.details["path"] == ".corral/validate.yaml"
    assert world.lane_data(lane_id) == before and world.events_json() == events
    assert not world.scratch.exists() or list(world.scratch.iterdir()) == []


def test_a_shell_string_instead_of_an_argv_list_is_spec_invalid_at_its_line(world: World) -> None:
    config = "validations:\n  - name: lint\n    argv: python3 -m pyflakes .\n"
    base = world.commit({**BASE_FILES, ".corral/validate.yaml": config})
    _, lane_id = world.lane(base)
    before = world.lane_data(lane_id)
    events = world.events_json()
    error = refused("spec_invalid", world.verify)
    assert isinstance(error, SpecError)
    (diagnostic,) = error.diagnostics
    assert diagnostic.line == 3 and diagnostic.pointer == "/validations/0/argv"
    assert diagnostic.path == f"{base[:12]}:.corral/validate.yaml"
    assert f"{base[:12]}:.corral/validate.yaml:3:" in error.message
    assert world.lane_data(lane_id) == before and world.events_json() == events


def test_a_missing_sandbox_refuses_verify_and_nothing_runs(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    base = world.commit(BASE_FILES)
    _, lane_id = world.lane(base)
    before = world.lane_data(lane_id)
    no_bwrap = world.root / "bin"
    no_bwrap.mkdir()
    git_binary = shutil.which("git")
    assert git_binary is not None
    (no_bwrap / "git").symlink_to(git_binary)
    monkeypatch.setenv("PATH", str(no_bwrap))
    refused("sandbox_unavailable", world.verify)
    assert world.lane_data(lane_id) == before
    assert list(world.scratch.iterdir()) == [], "a snapshot was made although nothing could run"


class HoldTheRun:
    """A thread that waits for the slow check to start, runs ``action`` meanwhile, then lets it finish."""

    def __init__(self, world: World, action: Callable[[], None]) -> None:
        self.world = world
        self.action = action
        self.failures: list[BaseException] = []
        self.thread = threading.Thread(target=self._body, daemon=True)
        self.thread.start()

    def _body(self) -> None:
        try:
            deadline = time.monotonic() + 30
            while not list(self.world.scratch.glob("*/snapshot/.corral")):
                assert time.monotonic() < deadline, "the snapshot was never made"
                time.sleep(0.01)
            (snapshot,) = [p.parent for p in self.world.scratch.glob("*/snapshot/.corral")]
            try:
                self.action()
            finally:
                (snapshot / "go").touch()
        except BaseException as exc:
            self.failures.append(exc)

    def join(self) -> None:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        assert self.failures == []


def test_a_fence_change_during_the_run_invalidates_it_and_records_nothing(world: World) -> None:
    base = world.commit({**BASE_FILES, ".corral/validate.yaml": SLOW})
    _, lane_id = world.lane(base)
    credential_file = world.root / "credentials" / "ctl.json"
    credentials.save(credential_file, world.credential, world.store.url)
    before = world.lane_data(lane_id)

    def resume_elsewhere() -> None:  # another process resumes the controller while the check runs
        subprocess.run(
            [sys.executable, "-c", RESUME, str(world.store.path), str(world.cache), str(credential_file)],
            check=True,
            capture_output=True,
            timeout=60,
        )

    last_seq = world.store.events()[-1].seq
    helper = HoldTheRun(world, resume_elsewhere)
    error = refused("validation_invalidated", world.verify)
    helper.join()
    assert isinstance(error, RefusedError) and error.details["cause"] == "fence_stale"
    assert error.details["lane"] == lane_id
    # Nothing recorded: the lane as before; the only new event is the resume.
    assert world.lane_data(lane_id) == before
    new_events = [e for e in world.store.events() if e.seq > last_seq]
    assert [(e.instance_id, e.trigger) for e in new_events] == [("controller/ctl", "resume")]
    assert list(world.scratch.iterdir()) == []

    # The old credential is now refused up front (nothing runs); the new one verifies.
    refused("fence_stale", world.verify)
    assert list(world.scratch.iterdir()) == []
    fresh = credentials.load(credential_file, "ctl", world.store.url)
    assert fresh.generation == world.credential.generation + 1
    helper = HoldTheRun(world, lambda: None)
    result = world.verify(credential=fresh)
    helper.join()
    assert result.verification["passed"] is True and result.verification["fence_generation"] == fresh.generation
    assert world.lane_data(lane_id)[1]["verification"] == result.verification


def test_limits_in_validate_yaml_are_applied_and_their_maxima_enforced(world: World) -> None:
    config = (
        "validations:\n  - name: loud\n    argv: [python3, -c, \"print('x' * 300000)\"]\n"
        "    limits: {output_kb: 64, tmp_mb: 8}\n"
    )
    world.lane(world.commit({**BASE_FILES, ".corral/validate.yaml": config}))
    (record,) = world.verify().verification["results"]
    assert record["passed"] is True and record["truncated"] is True and record["output_bytes"] == 300001
    assert record["limits"]["output_kb"] == 64 and record["limits"]["tmp_mb"] == 8
    assert record["limits"]["processes"] == 256, "the others keep their defaults"


def test_a_limit_past_its_maximum_is_spec_invalid(world: World) -> None:
    config = "validations:\n  - name: lint\n    argv: [python3, -V]\n    limits: {processes: 100000}\n"
    base = world.commit({**BASE_FILES, ".corral/validate.yaml": config})
    world.lane(base)
    error = refused("spec_invalid", world.verify)
    assert isinstance(error, SpecError)
    assert error.diagnostics[0].pointer == "/validations/0/limits/processes"


def test_verify_refuses_while_the_writer_works_or_moved(world: World) -> None:
    """Issue 11: a verification recorded mid-edit would be for a worktree nobody saw settle."""
    from runner.service import RelayInput

    base = world.commit(BASE_FILES)
    world.lane(base)
    world.service.receipts.relay(RelayInput("ctl", world.credential, "w1", "sleep 30"))
    error = refused("agent_not_settled", world.verify)
    assert error.details["status"] == "working"
    lease = next(i for i in world.store.find("writer") if i.data["name"] == "w1")
    world.host.close(lease.data["pane_id"])  # stop the long run; the lane's agent is now gone
    refused("identity_changed", world.verify)


def test_verify_at_a_cursor_refuses_a_writer_that_moved(world: World) -> None:
    base = world.commit(BASE_FILES)
    world.lane(base)
    moved = WriterVerifyInput("ctl", world.credential, "w1", expected_state_change_seq=5)
    error = refused("cursor_mismatch", lambda: world.service.writers.verify(moved, scratch=world.scratch))
    assert (error.details["expected_seq"], error.details["observed_seq"]) == (5, 0)
    at = WriterVerifyInput("ctl", world.credential, "w1", expected_state_change_seq=0)
    assert world.service.writers.verify(at, scratch=world.scratch).verification["passed"] is True


def test_a_failed_validation_is_refused_validation_failed_with_the_recorded_result(world: World) -> None:
    """What ``corral writer verify`` and a plan's verify step raise: exit 4, never a success."""
    base = world.commit(BASE_FILES)
    _, lane_id = world.lane(base, setup=_untracked_and_ignored)
    result = world.verify(tails=True)
    error = refused("validation_failed", result.check)
    assert error.status.exit == 4 and error.details["failed"] == ["no-todo"]
    assert error.details["result"]["verification"] == result.verification and error.details["result"]["tails"]
    assert world.lane_data(lane_id)[1]["verification"]["passed"] is False, "recorded all the same"


def test_verify_bound_to_a_content_digest_runs_only_on_that_content(world: World) -> None:
    """Issue 10: --expect-content refuses (git_content_mismatch) before anything runs when the files
    are not the reviewed ones, and records the digest it ran on when they are."""
    base = world.commit(BASE_FILES)
    worktree, lane_id = world.lane(base)
    (worktree / "app.py").write_text("print('reviewed')\n")
    reviewed = world.service.writers.preflight(str(worktree))["content_sha256"]
    (worktree / "app.py").write_text("print('edited after the review')\n")
    version, _ = world.lane_data(lane_id)
    inp = WriterVerifyInput("ctl", world.credential, "w1", expected_content_sha256=reviewed)
    error = refused("git_content_mismatch", lambda: world.service.writers.verify(inp, scratch=world.scratch))
    assert error.details["expected"] == reviewed
    assert world.lane_data(lane_id)[0] == version, "nothing recorded"
    now = world.service.writers.preflight(str(worktree))["content_sha256"]
    inp = WriterVerifyInput("ctl", world.credential, "w1", expected_content_sha256=now)
    recorded = world.service.writers.verify(inp, scratch=world.scratch).verification
    assert recorded["content_sha256"] == now and world.lane_data(lane_id)[1]["verification"]["content_sha256"] == now

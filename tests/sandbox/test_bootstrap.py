"""The validation bootstrap: lockfile-pinned installs with network, then the offline gate.

No internet here: the npm lock pins local tarballs (``file:`` dependencies made with ``npm pack``),
the pip lock pins a wheel built by hand and served by a loopback HTTP server the test starts. The
bootstrap stage reaches that server (it keeps the host's network); a validation of the gate cannot
(its own network namespace). One npm package has a ``postinstall`` script that would leave a marker:
it must never run. A lock the lane changed, or replaced by a symlink, refuses the verify before
anything runs.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.errors import CorralError, InputError, RefusedError, SpecError
from runner.sandbox import bootstrap
from runner.sandbox.bwrap import CommandResult, Sandbox
from runner.sandbox.validation import load, snapshot
from tests.sandbox.test_verify import World, _require_bwrap, git

WHEEL = "tinypy-0.1-py3-none-any.whl"


def _wheel(directory: Path) -> Path:
    """A minimal pure-Python wheel (``tinypy``, ``VALUE = 42``) with a correct RECORD."""
    files = {
        "tinypy/__init__.py": b"VALUE = 42\n",
        "tinypy-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypy\nVersion: 0.1\n",
        "tinypy-0.1.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("tinypy-0.1.dist-info/RECORD,,")
    path = directory / WHEEL
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("tinypy-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _npm(*args: str, cwd: Path, home: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "npm_config_cache": str(home / "npm-cache")}
    subprocess.run(["npm", *args, "--no-audit", "--no-fund"], cwd=cwd, env=env, check=True, capture_output=True)


def _npm_project(repo: Path, work: Path) -> None:
    """``web/``: a package.json with two ``file:`` tarball dependencies and its lock, made offline.
    ``evil`` has a postinstall script that would write ``marker`` into its installed directory."""
    packages = {
        "tinyjs": {"name": "tinyjs", "version": "1.0.0", "main": "index.js"},
        "evil": {
            "name": "evil",
            "version": "1.0.0",
            "main": "index.js",
            "scripts": {"postinstall": "node -e \"require('fs').writeFileSync('marker', 'ran')\""},
        },
    }
    vendor = repo / "web" / "vendor"
    vendor.mkdir(parents=True)
    for name, manifest in packages.items():
        source = work / name
        source.mkdir()
        (source / "package.json").write_text(json.dumps(manifest))
        (source / "index.js").write_text("module.exports = 42;\n")
        _npm("pack", "--pack-destination", str(vendor), cwd=source, home=work)
    dependencies = {name: f"file:vendor/{name}-1.0.0.tgz" for name in packages}
    (repo / "web" / "package.json").write_text(
        json.dumps({"name": "web", "version": "0.0.0", "dependencies": dependencies})
    )
    _npm("install", "--package-lock-only", "--ignore-scripts", cwd=repo / "web", home=work)
    assert (repo / "web" / "package-lock.json").is_file()


class Wheels:
    """A loopback HTTP server for the wheel, counting the requests it answered."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.requests = 0
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(directory), **kwargs)

            def do_GET(self) -> None:
                outer.requests += 1
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _validate(port: int) -> str:
    return f"""\
bootstrap:
  - kind: npm
    directory: web
    timeout: 300
  - kind: pip
    lock: requirements.lock
validations:
  - name: node-uses-it
    argv:
      - node
      - -e
      - |
        const fs = require('fs');
        if (fs.existsSync('web/node_modules/evil/marker')) {{ console.log('postinstall ran'); process.exit(5); }}
        if (!fs.existsSync('web/node_modules/evil/index.js')) {{ console.log('evil not installed'); process.exit(6); }}
        process.chdir('web');
        console.log('tinyjs', require(require.resolve('tinyjs', {{paths: [process.cwd()]}})));
  - name: python-uses-it
    argv: [python3, -c, "import tinypy; assert tinypy.VALUE == 42; print('tinypy', tinypy.__file__)"]
  - name: offline
    argv:
      - python3
      - -c
      - |
        import socket, sys
        try:
            socket.create_connection(('127.0.0.1', {port}), timeout=3).close()
        except OSError as exc:
            print('unreachable:', exc)
            sys.exit(0)
        print('the gate reached the host: it is not offline')
        sys.exit(7)
"""


@pytest.fixture(scope="module")
def npm_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``web/`` made once for the module (three npm runs, seconds): each test copies it into its own
    repository, byte for byte what ``npm pack`` and ``npm install --package-lock-only`` wrote."""
    _require_bwrap()
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    root = tmp_path_factory.mktemp("npm-template")
    (root / "repo").mkdir()
    (root / "work").mkdir()
    _npm_project(root / "repo", root / "work")
    return root / "repo" / "web"


@pytest.fixture
def world(tmp_path: Path, npm_template: Path) -> Iterator[tuple[World, Wheels]]:
    w = World(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    served = work / "served"
    served.mkdir()
    wheel = _wheel(served)
    wheels = Wheels(served)
    shutil.copytree(npm_template, w.main / "web", symlinks=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (w.main / "requirements.lock").write_text(
        f"tinypy @ http://127.0.0.1:{wheels.port}/{WHEEL} --hash=sha256:{digest}\n"
    )
    (w.main / ".corral").mkdir()
    (w.main / ".corral" / "validate.yaml").write_text(_validate(wheels.port))
    (w.main / ".gitignore").write_text("node_modules/\n")
    git("add", "-A", cwd=w.main)
    git("commit", "-q", "-m", "base", cwd=w.main)
    yield w, wheels
    wheels.close()
    w.store.close()
    shutil.rmtree(w.scratch, ignore_errors=True)


def _base(w: World) -> str:
    return git("rev-parse", "HEAD", cwd=w.main)


def _run(w: World, worktree: Path) -> tuple[list[bootstrap.StepResult], list[CommandResult]]:
    """The bootstrap and the gate, straight on the sandbox (no lane)."""
    sandbox = Sandbox()
    base = _base(w)
    commands, steps = load(str(worktree), base)
    with snapshot(str(worktree), w.scratch, sandbox) as (snap, home):
        booted, prepared = bootstrap.run(str(worktree), base, snap, home, steps, sandbox, tail=True)
        results = sandbox.run_all(snap, home, [prepared.gate(c) for c in commands], tail=True)
    return booted, results


def _refused(code: str, call: Callable[[], Any]) -> CorralError:
    with pytest.raises(CorralError) as caught:
        call()
    assert caught.value.code == code, caught.value.to_dict()
    return caught.value


@pytest.mark.slow  # npm ci and pip install in the sandbox: seconds
def test_a_pinned_install_serves_the_offline_gate_and_is_recorded(world: tuple[World, Wheels]) -> None:
    w, wheels = world
    base = _base(w)
    worktree, lane_id = w.lane(base)
    (worktree / "web" / "node_modules").mkdir()
    (worktree / "web" / "node_modules" / "stale.txt").write_text("the lane's own: replaced\n")
    result = w.verify(tails=True)
    v = result.verification
    steps = v["bootstrap"]
    assert [(s["kind"], s["lock"], s["passed"]) for s in steps] == [
        ("npm", "web/package-lock.json", True),
        ("pip", "requirements.lock", True),
    ], result.tails
    assert steps[0]["argv"][:3] == ["npm", "ci", "--ignore-scripts"]
    assert {"--require-hashes", "--no-deps", "--only-binary", ":all:"} <= set(steps[1]["argv"])
    for step in steps:
        assert step["lock_sha256"] == hashlib.sha256((w.main / step["lock"]).read_bytes()).hexdigest()
        assert len(step["output_sha256"]) == 64 and step["exit_status"] == 0 and step["duration_seconds"] >= 0
    assert [(r["name"], r["passed"]) for r in v["results"]] == [
        ("node-uses-it", True),
        ("python-uses-it", True),
        ("offline", True),
    ], result.tails
    assert v["passed"] is True
    assert "tinyjs 42" in result.tails["node-uses-it"]
    assert "unreachable" in result.tails["offline"]
    assert wheels.requests >= 1  # the bootstrap stage reached the host's loopback; the gate could not
    _, data = w.lane_data(lane_id)
    assert data["verification"]["bootstrap"] == steps  # recorded with the lane, as the validations are
    assert not (worktree / "web" / "node_modules" / "tinyjs").exists()  # the worktree is untouched


@pytest.mark.slow  # npm ci and pip install in the sandbox: seconds
def test_a_lifecycle_script_never_runs(world: tuple[World, Wheels]) -> None:
    w, _ = world
    booted, results = _run(w, w.main)
    assert all(b.passed for b in booted), [b.result.tail for b in booted]
    node = next(r for r in results if r.name == "node-uses-it")
    assert node.passed, node.tail  # exit 5 had the postinstall marker been written


@pytest.mark.slow  # npm ci and pip install in the sandbox: seconds
def test_a_failed_bootstrap_step_is_recorded_and_the_gate_does_not_run(world: tuple[World, Wheels]) -> None:
    w, wheels = world
    # The wheel can no longer be fetched: the server answers 404, which pip gives up on at once (a
    # refused connection it retries five times with backoff, about 8 s, for the same failed step).
    (wheels.directory / WHEEL).unlink()
    w.lane(_base(w))
    with pytest.raises(RefusedError) as caught:
        w.verify().check()
    assert caught.value.code == "validation_failed"
    v = caught.value.details["result"]["verification"]
    assert [s["passed"] for s in v["bootstrap"]] == [True, False]
    assert v["results"] == [] and v["passed"] is False
    assert caught.value.details["failed"] == ["bootstrap:pip:requirements.lock"]


@pytest.mark.parametrize("lock", ["web/package-lock.json", "requirements.lock"])
def test_a_lock_the_lane_changed_is_bootstrap_lock_mismatch(world: tuple[World, Wheels], lock: str) -> None:
    w, wheels = world
    worktree, lane_id = w.lane(_base(w))
    with open(worktree / lock, "a") as changed:
        changed.write("\n")
    before = w.lane_data(lane_id)
    error = _refused("bootstrap_lock_mismatch", w.verify)
    assert error.details["path"] == lock
    assert w.lane_data(lane_id) == before  # nothing recorded
    assert wheels.requests == 0  # nothing ran


def test_an_untracked_shrinkwrap_or_npmrc_must_match_too(world: tuple[World, Wheels]) -> None:
    w, _ = world
    worktree, _ = w.lane(_base(w))
    (worktree / "web" / ".npmrc").write_text("registry=http://127.0.0.1:9/\n")
    error = _refused("bootstrap_lock_invalid", w.verify)  # not at the base commit
    assert error.details["path"] == "web/.npmrc"
    (worktree / "web" / ".npmrc").unlink()
    shutil.copy(worktree / "web" / "package-lock.json", worktree / "web" / "npm-shrinkwrap.json")
    assert _refused("bootstrap_lock_invalid", w.verify).details["path"] == "web/npm-shrinkwrap.json"


def test_a_symlinked_lock_is_refused_even_with_the_same_bytes(world: tuple[World, Wheels]) -> None:
    w, _ = world
    worktree, _ = w.lane(_base(w))
    shutil.copy(worktree / "requirements.lock", worktree / "copy.lock")
    (worktree / "requirements.lock").unlink()
    (worktree / "requirements.lock").symlink_to("copy.lock")
    error = _refused("bootstrap_lock_invalid", w.verify)
    assert error.details["where"] == "requirements.lock" and "symlink" in error.message


def test_a_lock_below_a_symlinked_directory_is_refused(world: tuple[World, Wheels]) -> None:
    w, _ = world
    worktree, _ = w.lane(_base(w))
    os.rename(worktree / "web", worktree / "real-web")
    (worktree / "web").symlink_to("real-web")
    error = _refused("bootstrap_lock_invalid", w.verify)
    assert error.details["where"] == "web"


def test_a_lock_that_includes_another_file_is_refused(world: tuple[World, Wheels]) -> None:
    w, _ = world
    with open(w.main / "requirements.lock", "a") as lock:
        lock.write("-r more.txt\n")
    git("commit", "-q", "-am", "include", cwd=w.main)
    _refused("bootstrap_lock_invalid", lambda: _run(w, w.main))


def _config(root: Path, text: str) -> SpecError | InputError:
    """Load ``text`` as the validate.yaml of a fresh repository's first commit; it must be refused."""
    repo = root / "repo"
    (repo / ".corral").mkdir(parents=True)
    (repo / ".corral" / "validate.yaml").write_text(text)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "-m", "config", cwd=repo)
    with pytest.raises((SpecError, InputError)) as caught:
        load(str(repo), git("rev-parse", "HEAD", cwd=repo))
    return caught.value


GATE = 'validations:\n  - {name: t, argv: ["true"]}\n'


@pytest.mark.parametrize(
    ("step", "pointer", "words"),
    [
        ("{kind: npm, directory: web, command: 'npm install'}", "/bootstrap/0", "unknown key"),
        ("{kind: pip, lock: /etc/passwd}", "/bootstrap/0/lock", "relative to the repository root"),
        ("{kind: pip, lock: ../outside.lock}", "/bootstrap/0/lock", "relative to the repository root"),
        ("{kind: pip, lock: a/./b.lock}", "/bootstrap/0/lock", "relative to the repository root"),
        ("{kind: npm, directory: web/../..}", "/bootstrap/0/directory", ""),
        ("{kind: yarn, directory: web}", "/bootstrap/0/kind", "is not one of"),
        ("{kind: pip, directory: web}", "/bootstrap/0", "lock"),
    ],
)
def test_the_schema_is_strict_and_names_the_field(tmp_path: Path, step: str, pointer: str, words: str) -> None:
    error = _config(tmp_path, f"bootstrap:\n  - {step}\n{GATE}")
    assert isinstance(error, SpecError)
    diagnostic = error.diagnostics[0]
    assert diagnostic.pointer == pointer and words in diagnostic.message, diagnostic
    assert diagnostic.path.endswith(":.corral/validate.yaml") and diagnostic.line == 2


def test_a_step_named_twice_is_spec_invalid(tmp_path: Path) -> None:
    error = _config(
        tmp_path, f"bootstrap:\n  - {{kind: npm, directory: web}}\n  - {{kind: npm, directory: web}}\n{GATE}"
    )
    assert error.code == "spec_invalid" and "twice" in error.message


def test_the_stage_has_the_network_and_the_gate_does_not() -> None:
    """The argv itself: the bootstrap keeps the host's network namespace, writes only its cache."""
    sandbox = Sandbox(bwrap="bwrap", uid=os.geteuid())
    step = bootstrap.Step("pip", "requirements.lock")
    with tempfile.TemporaryDirectory() as root:
        snap = Path(root) / "snapshot"
        snap.mkdir()
        prepared = bootstrap.prepare(snap, Path(root) / "bootstrap", [step], sandbox)
        (_, stage), *_ = prepared.commands
        argv = sandbox.command_line(snap, Path(root) / "home", stage)
        target = str(Path(root) / "bootstrap" / "python")
        assert (
            "--share-net" in argv
            and ["--bind", target, target] == argv[argv.index("--bind") : argv.index("--bind") + 3]
        )
        gate = sandbox.command_line(snap, Path(root) / "home", prepared.gate(bootstrap_gate()))
        assert "--share-net" not in gate and "--bind" not in gate
        assert ["--ro-bind", target, target] == gate[gate.index(target) - 1 : gate.index(target) + 2]
        assert gate[gate.index("PYTHONPATH") + 1] == target


def bootstrap_gate() -> Any:
    from runner.sandbox.bwrap import Command

    return Command("t", ("true",))

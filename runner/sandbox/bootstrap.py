"""The validation bootstrap: lockfile-pinned dependencies installed with network, before the offline gate.

``validate.yaml`` (at the lane's base commit) may name a ``bootstrap`` list of steps; each names only
a kind and a lock, never a command: corral fixes the argv.

- ``npm`` (``directory: D``): ``npm ci --ignore-scripts --no-audit --no-fund`` in ``D`` of the
  snapshot, ``npm_config_ignore_scripts=true`` too, so no lifecycle script of any package runs.
  ``D/node_modules`` is a directory of the run's private cache, the only writable place besides the
  sandbox's tmpfs ``/tmp`` and home; in the gate the same directory is bound read-only over
  ``D/node_modules`` (whatever the snapshot had there is replaced).
- ``pip`` (``lock: L``): ``python3 -m pip install --isolated --require-hashes --no-deps
  --only-binary :all: --no-compile --target CACHE -r L``: every package named with its hash, wheels
  only (an sdist would run its build code), nothing resolved beyond the lock; the gate gets ``CACHE``
  read-only on ``PYTHONPATH`` (unless a validation sets its own ``PYTHONPATH``).

Before anything runs, every pinned file must be a regular file of the snapshot (no symlink, nor
below one) and a regular file at the base commit, with the same bytes: the lock (``D/package-lock.json``
or ``L``), and for npm ``D/npm-shrinkwrap.json`` and ``D/.npmrc`` when the snapshot has them (npm
prefers a shrinkwrap to the lock, and reads a project ``.npmrc``). A pip lock may not include other
files (``-r``, ``-c``). Otherwise the verify is refused: ``bootstrap_lock_invalid`` (not a regular file,
a symlink, missing) or ``bootstrap_lock_mismatch`` (the bytes differ from the base commit's).

The stage runs in the same sandbox as a validation but keeps the host's network namespace
(``--share-net``): no capabilities, a fresh uid, the snapshot read-only, a private home and ``/tmp``,
the same bounds. A failed step is recorded and the gate does not run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner.errors import RefusedError
from runner.git import preflight
from runner.sandbox.bwrap import Command, CommandResult, Limits, Sandbox

NPM_ARGV = ("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
NPM_ENV = {"npm_config_ignore_scripts": "true", "npm_config_update_notifier": "false", "npm_config_fund": "false"}
PIP_ARGV = (
    "python3",
    "-m",
    "pip",
    "install",
    "--isolated",
    "--disable-pip-version-check",
    "--no-input",
    "--require-hashes",
    "--no-deps",
    "--only-binary",
    ":all:",
    "--no-compile",
)
# Lines of a pip lock that would pull another (unpinned) file in.
PIP_INCLUDES = ("-r", "-c", "--requirement", "--constraint")


@dataclass(frozen=True)
class Step:
    """One bootstrap step as ``validate.yaml`` declares it: a kind and a path, relative to the root."""

    kind: str  # "npm" (path: the directory of package-lock.json) or "pip" (path: the lock file)
    path: str
    timeout: float = 600.0
    limits: Limits = field(default_factory=Limits)

    @property
    def name(self) -> str:
        return f"bootstrap:{self.kind}:{self.path}"

    @property
    def lock(self) -> str:
        """The lock file's path, relative to the repository root."""
        return _join(self.path, "package-lock.json") if self.kind == "npm" else self.path

    def pinned(self, snap: Path) -> list[str]:
        """Every file that must match the base commit: the lock, and npm's other inputs when present."""
        if self.kind != "npm":
            return [self.lock]
        extra = [_join(self.path, name) for name in ("npm-shrinkwrap.json", ".npmrc")]
        return [self.lock, *(p for p in extra if os.path.lexists(snap / p))]


@dataclass(frozen=True)
class StepResult:
    """How one bootstrap step ended, with the digest of the lock it installed from."""

    step: Step
    lock_sha256: str
    result: CommandResult

    @property
    def passed(self) -> bool:
        return self.result.passed

    def to_record(self) -> dict[str, Any]:
        return {
            "kind": self.step.kind,
            "lock": self.step.lock,
            "lock_sha256": self.lock_sha256,
            **self.result.to_record(),
        }


def steps_from(data: Sequence[Mapping[str, Any]], shown: str) -> list[Step]:
    """The steps of a schema-checked ``bootstrap`` list (one npm step per directory, one pip step per lock)."""
    from runner.errors import InputError

    steps = [
        Step(
            str(s["kind"]),
            os.path.normpath(str(s["directory"] if s["kind"] == "npm" else s["lock"])),
            float(s.get("timeout", 600)),
            Limits(**dict(s.get("limits") or {})),
        )
        for s in data
    ]
    for step in steps:
        # The schema refuses these; held here too, since a path out of the snapshot must never be bound.
        if os.path.isabs(step.path) or step.path.split("/")[0] in ("..", ".git"):
            raise InputError(
                "bootstrap", f"{shown} names {step.path!r}: not inside the repository", code="spec_invalid"
            )
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise InputError("bootstrap", f"{shown} names a bootstrap step twice", code="spec_invalid")
    return steps


def check_locks(worktree: str, base_commit: str, snap: Path, steps: Sequence[Step]) -> dict[str, str]:
    """Every pinned file is a regular file in the snapshot with the base commit's bytes: their sha256 by path.

    Raises:
        RefusedError: ``bootstrap_lock_invalid`` (a symlink, below one, not a regular file, missing in
            the snapshot or at the base commit, or a pip lock that includes another file);
            ``bootstrap_lock_mismatch`` (its bytes differ from the base commit's).
    """
    digests: dict[str, str] = {}
    for step in steps:
        for path in step.pinned(snap):
            data = _regular_bytes(snap, path)
            base = preflight.regular_file_at(worktree, base_commit, path)
            if base is None:
                raise RefusedError(
                    f"bootstrap {step.name}: {path} is not a regular file at the base commit {base_commit[:12]}",
                    code="bootstrap_lock_invalid",
                    path=path,
                    step=step.name,
                )
            if data != base:
                raise RefusedError(
                    f"bootstrap {step.name}: {path} differs from the base commit {base_commit[:12]}: a lane may "
                    "not change what the networked bootstrap installs (commit the lock on the base first)",
                    code="bootstrap_lock_mismatch",
                    path=path,
                    step=step.name,
                    sha256=hashlib.sha256(data).hexdigest(),
                    base_sha256=hashlib.sha256(base).hexdigest(),
                )
            if step.kind == "pip" and _includes(data):
                raise RefusedError(
                    f"bootstrap {step.name}: {path} includes another file (-r/-c): "
                    "every requirement must be in the lock itself",
                    code="bootstrap_lock_invalid",
                    path=path,
                    step=step.name,
                )
            digests[path] = hashlib.sha256(data).hexdigest()
    return digests


def _regular_bytes(snap: Path, path: str) -> bytes:
    """The bytes of ``path`` in the snapshot; refused unless it and every directory above it are no symlink."""
    current = snap
    parts = path.split("/")
    for index, part in enumerate(parts):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            mode = None
        last = index == len(parts) - 1
        if mode is None or stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) if last else stat.S_ISDIR(mode)):
            what = "missing" if mode is None else "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
            shown = "/".join(parts[: index + 1])
            raise RefusedError(
                f"bootstrap: {path} must be a regular file of the worktree; {shown} is {what}",
                code="bootstrap_lock_invalid",
                path=path,
                where=shown,
            )
    return current.read_bytes()


def _includes(data: bytes) -> bool:
    """A line of the lock that pulls another file in (``-r F``, ``-rF``, ``--requirement=F``, ``-c``…)."""
    for line in data.decode("utf-8", "replace").splitlines():
        words = line.split()
        if words and (words[0].split("=")[0] in PIP_INCLUDES or words[0][:2] in PIP_INCLUDES):
            return True
    return False


@dataclass(frozen=True)
class Prepared:
    """The bootstrap's commands, and what the gate's commands get from it (read-only binds, environment)."""

    commands: list[tuple[Step, Command]]
    binds: tuple[tuple[str, str], ...]
    env: Mapping[str, str]

    def gate(self, command: Command) -> Command:
        """``command`` with the bootstrap's cache read-only (its own environment wins over ours)."""
        return replace(command, binds=(*command.binds, *self.binds), env={**self.env, **dict(command.env)})


def prepare(snap: Path, cache: Path, steps: Sequence[Step], sandbox: Sandbox) -> Prepared:
    """Make the run's cache directories (given to the sandbox's uid) and the npm mount points in the
    snapshot (a ``node_modules`` already there is removed: the installed one replaces it)."""
    cache.mkdir(mode=0o755)
    commands: list[tuple[Step, Command]] = []
    binds: list[tuple[str, str]] = []
    env: dict[str, str] = {}
    python = cache / "python"
    for index, step in enumerate(steps):
        if step.kind == "npm":
            directory = snap / step.path if step.path != "." else snap
            modules = directory / "node_modules"
            if modules.is_symlink() or modules.is_file():
                modules.unlink()
            elif modules.exists():
                shutil.rmtree(modules)
            modules.mkdir(mode=0o755)
            sandbox.own(modules)
            target = cache / f"npm-{index}"
            target.mkdir(mode=0o755)
            command = Command(
                step.name,
                NPM_ARGV,
                step.timeout,
                NPM_ENV,
                step.limits,
                network=True,
                chdir=str(directory),
                writable=((str(target), str(modules)),),
            )
            binds.append((str(target), str(modules)))
        else:
            python.mkdir(mode=0o755, exist_ok=True)
            argv = (*PIP_ARGV, "--target", str(python), "-r", step.lock)
            command = Command(
                step.name, argv, step.timeout, {}, step.limits, network=True, writable=((str(python), str(python)),)
            )
            if not env:
                binds.append((str(python), str(python)))
                env = {"PYTHONPATH": str(python)}
        commands.append((step, command))
    sandbox.own(cache)
    return Prepared(commands, tuple(binds), env)


def run(
    worktree: str,
    base_commit: str,
    snap: Path,
    home: Path,
    steps: Sequence[Step],
    sandbox: Sandbox,
    tail: bool = False,
) -> tuple[list[StepResult], Prepared]:
    """Check the locks, then run each step in order (stopping at the first that fails)."""
    digests = check_locks(worktree, base_commit, snap, steps)
    prepared = prepare(snap, snap.parent / "bootstrap", steps, sandbox)
    results: list[StepResult] = []
    for step, command in prepared.commands:
        done = StepResult(step, digests[step.lock], sandbox.run(snap, home, command, tail))
        results.append(done)
        if not done.passed:
            break
    return results, prepared


def _join(directory: str, name: str) -> str:
    return name if directory in (".", "") else f"{directory}/{name}"

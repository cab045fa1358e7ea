"""Host validation of a writer lane: the repository's own commands, on a snapshot, in the sandbox.

The commands come from ``.corral/validate.yaml`` *at the lane's base commit* (so a lane cannot
rewrite the checks it is judged by), validated by ``schemas/validate.schema.json``: fixed argv lists,
an optional timeout, extra environment; never a shell string. The worktree's tracked and untracked
(not ignored) files are copied into a private snapshot directory, which the sandbox mounts read-only
at its own path; the worktree itself is never touched. Each validation may set ``limits`` (see
:data:`runner.sandbox.bwrap.LIMITS`) within the maxima the schema enforces. An optional ``bootstrap``
stage installs lockfile-pinned dependencies first, with network (:mod:`runner.sandbox.bootstrap`).

When the sandbox runs under its own uid (corral as root), the snapshot is given to that uid, and is
made under the system's temporary directory if the scratch directory is not reachable by other users
(a state home under ``/root``): bwrap, running as that uid, must be able to open it.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.errors import InputError, SpecError
from runner.git import preflight
from runner.sandbox.bootstrap import Step, steps_from
from runner.sandbox.bwrap import Command, Limits, Sandbox

CONFIG_PATH = ".corral/validate.yaml"


def load_commands(worktree: str, base_commit: str) -> list[Command]:
    """The validations declared at ``base_commit`` (see :func:`load`)."""
    return load(worktree, base_commit)[0]


def load(worktree: str, base_commit: str) -> tuple[list[Command], list[Step]]:
    """The validations and the bootstrap steps (``runner.sandbox.bootstrap``) declared at ``base_commit``.

    Raises:
        InputError: ``validation_missing`` when the base commit has no ``.corral/validate.yaml``.
        SpecError: the file is malformed or fails the schema (with its line numbers).
    """
    from runner.documents import schema, yamlsource

    raw = preflight.file_at(worktree, base_commit, CONFIG_PATH)
    if raw is None:
        raise InputError(
            "base_commit",
            f"the base commit {base_commit[:12]} has no {CONFIG_PATH}",
            code="validation_missing",
            path=CONFIG_PATH,
        )
    shown = f"{base_commit[:12]}:{CONFIG_PATH}"
    source = yamlsource.parse(yamlsource.decode(raw, shown), shown)
    diagnostics = schema.check(source, "validate")
    if diagnostics:
        raise SpecError(diagnostics)
    names = [v["name"] for v in source.data["validations"]]
    if len(set(names)) != len(names):
        raise InputError("validations", f"{shown} names a validation twice", code="spec_invalid")
    commands = [
        Command(
            v["name"],
            tuple(v["argv"]),
            float(v.get("timeout", 600)),
            dict(v.get("env") or {}),
            Limits(**dict(v.get("limits") or {})),
        )
        for v in source.data["validations"]
    ]
    return commands, steps_from(source.data.get("bootstrap") or [], shown)


def _reachable_by_others(path: Path) -> bool:
    """Every directory from ``/`` down to ``path`` lets other users pass (the x bit for others)."""
    for directory in (path, *path.parents):
        try:
            if not os.stat(directory).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


@contextmanager
def snapshot(worktree: str, root: Path, sandbox: Sandbox | None = None) -> Iterator[tuple[Path, Path]]:
    """A private copy of the worktree's files, removed afterwards, and the path of the sandbox's home
    (a tmpfs inside the sandbox: nothing is made for it on the host).

    Yields ``(snapshot_dir, home_dir)``. Symlinks are copied as symlinks, never followed. With a
    ``sandbox`` that runs under its own uid, the copy is owned by that uid (mode 0700 on its run
    directory: nobody else reads it).
    """
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    foreign = sandbox is not None and sandbox.uid is not None and sandbox.uid != os.geteuid()
    if foreign and not _reachable_by_others(root):
        root = Path(tempfile.gettempdir())
    run = root / f"corral-run-{uuid.uuid4().hex}" if foreign else root / uuid.uuid4().hex
    snap, home = run / "snapshot", run / "home"
    run.mkdir(mode=0o700)
    try:
        snap.mkdir(mode=0o755)
        source = Path(os.path.realpath(worktree))
        for relative in preflight.listed_files(worktree):
            origin = source / relative
            target = snap / relative
            if not os.path.lexists(origin):
                continue  # listed by git but deleted in the worktree
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_symlink():
                os.symlink(os.readlink(origin), target)
            elif origin.is_file():
                shutil.copy2(origin, target, follow_symlinks=False)
        if sandbox is not None:
            sandbox.own(run)
        yield snap, home
    finally:
        shutil.rmtree(run, ignore_errors=True)

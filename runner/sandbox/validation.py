"""Host validation of a writer lane: the repository's own commands, on a snapshot, in the sandbox.

The commands come from ``.corral/validate.yaml`` *at the lane's base commit* (so a lane cannot
rewrite the checks it is judged by), validated by ``schemas/validate.schema.json``: fixed argv lists,
an optional timeout, extra environment; never a shell string. The worktree's tracked and untracked
(not ignored) files are copied into a private snapshot directory, which the sandbox mounts read-only
at its own path; the worktree itself is never touched.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.errors import InputError, SpecError
from runner.git import preflight
from runner.sandbox.bwrap import Command

CONFIG_PATH = ".corral/validate.yaml"


def load_commands(worktree: str, base_commit: str) -> list[Command]:
    """The validations declared at ``base_commit``.

    Raises:
        InputError: ``validation_missing`` when the base commit has no ``.corral/validate.yaml``.
        SpecError: the file is malformed or fails the schema (with its line numbers).
    """
    from runner.spec import schema, yamlsource

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
    return [
        Command(v["name"], tuple(v["argv"]), float(v.get("timeout", 600)), dict(v.get("env") or {}))
        for v in source.data["validations"]
    ]


@contextmanager
def snapshot(worktree: str, root: Path) -> Iterator[tuple[Path, Path]]:
    """A private copy of the worktree's files and an empty private home, removed afterwards.

    Yields ``(snapshot_dir, home_dir)``. Symlinks are copied as symlinks, never followed.
    """
    run = root / uuid.uuid4().hex
    snap, home = run / "snapshot", run / "home"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    run.mkdir(mode=0o700)
    try:
        snap.mkdir(mode=0o755)
        home.mkdir(mode=0o700)
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
        yield snap, home
    finally:
        shutil.rmtree(run, ignore_errors=True)

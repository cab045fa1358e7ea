"""The tool arguments that are paths on the server's machine, and their containment.

Every server that takes tool arguments from a client it does not trust (``corral serve``, ``corral mcp
--http``) checks each argument of :data:`PATH_ARGS` with :func:`contain_paths` before the tool runs,
and a plan's step arguments again before each step it runs (``Runtime.contain_plan_paths``): never a
raw ``..``, and under ``--workdir-root`` (symlinks resolved) when one is set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runner.errors import InputError

PATH_ARGS: dict[str, str] = {
    "cwd": "an agent's working directory (reviewer start)",
    "worktree": "a writer lane's linked worktree (writer start, preflight, scopes check)",
    "expect_cwd": "the working directory an agent close or adoption expects",
    "repository": "a memory project's repository (checkpoint, bootstrap)",
    "subdir": "a memory project's sub-directory, contained joined to its repository (symlinks resolved)",
    "plan": "a plan document: each path parameter of its steps (the step catalogue's path=True), "
    "checked at submission where the plan's inputs decide it and again before each step runs",
}
"""The tool arguments that are paths on the server's machine: each is contained under
``--workdir-root`` by :func:`contain_paths`, and a raw ``..`` is always refused.
``tests/http/test_paths.py`` fails for a tool argument that looks like a path and is in neither this
table nor :data:`NOT_PATH_ARGS`."""

NOT_PATH_ARGS: dict[str, str] = {
    "own": "scopes: repo-relative, no '..', no absolute path, checked by runner.scopes inside the worktree",
    "lock": "scopes, as own",
    "files": "a checkpoint's list of files: recorded as text, never opened",
    "auto_files": "a flag: git status is read under the project's (contained) repository and subdir",
    "instance": "an instance id (corral_draw), not a path",
    "repo": "the mesh's repository label: text that groups agents, never opened",
    "project": "a memory project's name (by default its repository directory's name), never opened",
}
"""Tool arguments whose names or descriptions look like paths but that the server never opens as one."""


def contain_paths(args: dict[str, Any], root: Path | None, names: Iterable[str] | None = None) -> None:
    """Path arguments (``names``, default :data:`PATH_ARGS`): never a raw ``..``;
    under ``root`` (symlinks resolved) when one is set. A ``subdir`` is checked joined to the
    ``repository`` beside it (or to ``root``), so a symlinked sub-directory cannot lead out.

    Raises:
        InputError: ``path_traversal`` or ``path_outside_root``, naming the argument.
    """
    for name in PATH_ARGS if names is None else names:
        value = args.get(name)
        if not isinstance(value, str):
            continue
        if ".." in value.split("/"):
            raise InputError(name, f"{value!r} has a '..' segment: give the path itself", code="path_traversal")
        if root is None:
            continue
        base = os.path.realpath(root)
        if name == "subdir":
            repository = args.get("repository")
            value = os.path.join(repository if isinstance(repository, str) else base, value)
        resolved = os.path.realpath(value)
        if resolved != base and not resolved.startswith(base.rstrip("/") + "/"):
            raise InputError(
                name, f"{value!r} is outside the server's working-directory root {base}", code="path_outside_root"
            )

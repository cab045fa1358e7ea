"""The scope hook: a pre-commit hook for a lane whose host cannot confine its agent's writes (Herdr).

Installed through the worktree's *own* configuration, never the main checkout's hooks directory:
``extensions.worktreeConfig`` is enabled (a repository-wide flag git requires before any
per-worktree key; set only when it is not already) and ``core.hooksPath`` is set with
``git config --worktree`` to a private directory of corral's state home holding two files:

* ``pre-commit``: a fixed Python script (:data:`SCRIPT`; nothing a caller gave is written into it).
  It reads ``scopes.json`` beside it, lists what the commit would hold with
  ``git diff --cached -z --name-only --no-renames`` (a rename is its old and its new path), judges
  each path by :class:`runner.git.audit.Judge`'s rules, restated in the script (a literal path and
  everything under it; a locked scope overlapping in either direction), and refuses the commit
  (exit 1, the paths on stderr) if any lies outside the owned scopes or inside a locked one.
* ``scopes.json``: the owned and locked scopes, and the worktree's previous ``core.hooksPath`` (if it
  had one of its own), restored at removal.

Removal unsets (or restores) that one worktree key and deletes the directory under the state home;
nothing in the worktree is touched. The hook is a guard rail, not a confinement: ``git commit
--no-verify`` skips it, and it replaces the repository's own hooks for this worktree while it is
installed. The release audit (:mod:`runner.git.audit`) is what enforces the scopes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from runner.git.preflight import GitReadError

SCRIPT = '''\
"""corral's scope hook: refuse a commit touching paths outside the lane's owned scopes or in locked ones."""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "scopes.json"), encoding="utf-8") as handle:
    scopes = json.load(handle)
owned, locked = set(scopes["owned"]), set(scopes["locked"])
below_locked = {s[:i] for s in locked for i, c in enumerate(s) if c == "/"}
listed = subprocess.run(
    ["git", "diff", "--cached", "-z", "--name-only", "--no-renames", "--no-ext-diff"],
    capture_output=True, check=True,
).stdout
bad = []
for raw in listed.split(b"\\0"):
    if not raw:
        continue
    path = raw.decode("utf-8", "surrogateescape")
    above = [path] + [path[:i] for i, c in enumerate(path) if c == "/"]
    if path in below_locked or any(a in locked for a in above):
        bad.append(("locked", path))
    elif not any(a in owned for a in above):
        bad.append(("outside", path))
if bad:
    mine = ", ".join(sorted(owned))
    sys.stderr.write("corral: this lane may commit only inside its owned scopes (%s); refused:\\n" % mine)
    for verdict, path in bad[:100]:
        sys.stderr.write("  %s %r\\n" % (verdict, path))
    if len(bad) > 100:
        sys.stderr.write("  ... and %d more\\n" % (len(bad) - 100))
    sys.exit(1)
'''


def _git(worktree: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR")}
    done = subprocess.run(["git", "-C", worktree, *args], capture_output=True, text=True, env=env, check=False)
    if check and done.returncode != 0:
        raise GitReadError(
            "worktree", f"git config failed in {worktree}: {done.stderr.strip() or done.returncode}", path=worktree
        )
    return done


def install(worktree: str, directory: Path, owned: Iterable[str], locked: Iterable[str]) -> None:
    """Write the hook into ``directory`` (private, under the state home) and point the worktree's own
    ``core.hooksPath`` at it.

    Raises:
        GitReadError: ``git_unreadable`` when git cannot set the worktree's configuration.
    """
    enabled = _git(worktree, "config", "--get", "--type=bool", "extensions.worktreeConfig", check=False)
    if enabled.stdout.strip() != "true":
        _git(worktree, "config", "extensions.worktreeConfig", "true")
    # Read only once the extension is on: without it, --worktree reads the shared configuration.
    previous = _git(worktree, "config", "--worktree", "--get", "core.hooksPath", check=False)
    prior = previous.stdout.strip() if previous.returncode == 0 else None
    if prior is not None and os.path.realpath(os.path.dirname(prior.rstrip("/"))) == os.path.realpath(directory.parent):
        prior = None  # ours (an install repeated), or a lane's that ended without release: never restored
    data = {"owned": sorted(set(owned)), "locked": sorted(set(locked)), "previous_hooks_path": prior}
    scopes_file = directory / "scopes.json"
    fd = os.open(scopes_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    hook = directory / "pre-commit"
    fd = os.open(hook, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o700)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        # The interpreter is this one's (corral's own), not anything a caller named.
        handle.write(f"#!{sys.executable}\n{SCRIPT}")
    os.chmod(hook, 0o700)
    _git(worktree, "config", "--worktree", "core.hooksPath", str(directory))


def remove(worktree: str, directory: Path) -> None:
    """Unset (or restore) the worktree's ``core.hooksPath`` if it is still ours, and delete ``directory``.
    Nothing in the worktree is touched; a worktree that is gone is left alone."""
    if not directory.is_dir():
        return
    prior = None
    with contextlib.suppress(OSError, ValueError):  # no record: unset the key rather than restore
        prior = json.loads((directory / "scopes.json").read_text(encoding="utf-8")).get("previous_hooks_path")
    if os.path.isdir(worktree):
        current = _git(worktree, "config", "--worktree", "--get", "core.hooksPath", check=False)
        if current.returncode == 0 and os.path.realpath(current.stdout.strip()) == os.path.realpath(directory):
            if prior:
                _git(worktree, "config", "--worktree", "core.hooksPath", str(prior))
            else:
                _git(worktree, "config", "--worktree", "--unset", "core.hooksPath")
    shutil.rmtree(directory, ignore_errors=True)


def installed(worktree: str) -> str | None:
    """The worktree's own ``core.hooksPath`` (None when it has none)."""
    found = _git(worktree, "config", "--worktree", "--get", "core.hooksPath", check=False)
    return found.stdout.strip() if found.returncode == 0 else None

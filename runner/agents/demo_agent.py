"""The scripted demo agent (kind ``script``): deterministic work in its working directory.

Reads the prompt on standard input and obeys one directive per line; any other text is a review
request. Used by ``make demo`` and the tests, where a real model cannot run.

==========================  =================================================================
directive                   effect
==========================  =================================================================
``echo TEXT``               print TEXT
``sleep SECONDS``           wait (0-600 s)
``wait-file PATH``          wait until PATH exists (tests use it to hold the agent mid-run)
``write PATH TEXT``         write TEXT and a newline to PATH inside the working directory
``append PATH TEXT``        append TEXT and a newline to PATH inside the working directory
``block``                   print the blocked marker and exit 3 (the kind's blocked code)
``fail CODE``               exit with CODE (1-255)
(anything else)             review: list the files under the working directory with their line
                            counts and SHA-256 prefixes, and a digest of the request
==========================  =================================================================

Paths are literal, relative, and may not leave the working directory.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

BLOCKED_MARKER = "CORRAL-BLOCKED"
BLOCKED_EXIT = 3
MAX_FILES = 50


def _inside(cwd: Path, relative: str) -> Path:
    if not relative or relative.startswith("/") or ".." in Path(relative).parts:
        raise SystemExit(f"demo agent: refusing path {relative!r}: literal relative paths inside the worktree only")
    return cwd / relative


def _review(cwd: Path, request: str) -> None:
    print(f"review of {cwd.name or cwd} (request sha256 {hashlib.sha256(request.encode()).hexdigest()[:12]})")
    files = sorted(p for p in cwd.rglob("*") if p.is_file() and ".git" not in p.relative_to(cwd).parts)
    for path in files[:MAX_FILES]:
        data = path.read_bytes()
        lines = data.count(b"\n")
        print(f"  {path.relative_to(cwd)}: {lines} lines, sha256 {hashlib.sha256(data).hexdigest()[:12]}")
    if len(files) > MAX_FILES:
        print(f"  … and {len(files) - MAX_FILES} more files")
    print(f"verdict: {len(files)} files reviewed, no findings")


def run(request: str, cwd: Path) -> int:
    """Obey ``request``; returns the exit status."""
    directives = [line.strip() for line in request.splitlines() if line.strip()]
    reviewed: list[str] = []
    for line in directives:
        word, _, rest = line.partition(" ")
        if word == "echo":
            print(rest)
        elif word == "sleep":
            time.sleep(min(max(float(rest or 0), 0.0), 600.0))
        elif word == "wait-file":
            target = _inside(cwd, rest)
            while not target.exists():
                time.sleep(0.01)
        elif word in ("write", "append"):
            relative, _, text = rest.partition(" ")
            target = _inside(cwd, relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a" if word == "append" else "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
            print(f"{word} {relative}")
        elif word == "block":
            print(f"{BLOCKED_MARKER}: the demo agent needs an operator's decision")
            return BLOCKED_EXIT
        elif word == "fail":
            print(f"failing with exit status {rest or 1}")
            return min(max(int(rest or 1), 1), 255)
        else:
            reviewed.append(line)
    if reviewed:
        _review(cwd, "\n".join(reviewed))
    return 0


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a text stream here
    raise SystemExit(run(sys.stdin.read(), Path(os.getcwd())))


if __name__ == "__main__":
    main()

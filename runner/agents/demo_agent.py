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
``finding TEXT``            (with ``--schema``) a finding: the verdict is ``request_changes``
(anything else)             review: list the files under the working directory with their line
                            counts and SHA-256 prefixes, and a digest of the request
==========================  =================================================================

Paths are literal, relative, and may not leave the working directory.

Given ``--schema FILE`` (a verdict schema: ``ask --schema``, the ``review`` recipe), the answer is one
JSON verdict instead of the review's text: ``{"verdict": "approve" | "request_changes", "findings":
[...], "summary": ...}``, ``request_changes`` when a ``finding`` directive named one; what ``echo``
directives say goes in the summary. The schema itself
is not read (corral checks the answer against it).
"""

from __future__ import annotations

import hashlib
import json
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


def _verdict(cwd: Path, request: str, findings: list[str], said: list[str]) -> None:
    files = [p for p in cwd.rglob("*") if p.is_file() and ".git" not in p.relative_to(cwd).parts]
    digest = hashlib.sha256(request.encode()).hexdigest()[:12]
    print(
        json.dumps(
            {
                "verdict": "request_changes" if findings else "approve",
                "findings": findings,
                "summary": "; ".join([*said, f"{len(files)} files reviewed (request sha256 {digest})"]),
            }
        )
    )


def run(request: str, cwd: Path, verdict: bool = False) -> int:
    """Obey ``request``; returns the exit status (``verdict``: answer with a JSON verdict)."""
    directives = [line.strip() for line in request.splitlines() if line.strip()]
    reviewed: list[str] = []
    findings: list[str] = []
    said: list[str] = []
    for line in directives:
        word, _, rest = line.partition(" ")
        if verdict and word == "finding":
            findings.append(rest)
        elif verdict and word == "echo":
            said.append(rest)  # the answer is the verdict alone: what it says goes in its summary
        elif word == "echo":
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
            if not verdict:
                print(f"{word} {relative}")
        elif word == "block":
            for earlier in said:  # what it said before it blocked, as it said it
                print(earlier)
            print(f"{BLOCKED_MARKER}: the demo agent needs an operator's decision")
            return BLOCKED_EXIT
        elif word == "fail":
            print(f"failing with exit status {rest or 1}")
            return min(max(int(rest or 1), 1), 255)
        else:
            reviewed.append(line)
    if verdict:
        _verdict(cwd, "\n".join(reviewed), findings, said)
    elif reviewed:
        _review(cwd, "\n".join(reviewed))
    return 0


def main(argv: list[str] | None = None) -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a text stream here
    args = sys.argv[1:] if argv is None else argv
    verdict = len(args) >= 2 and args[0] == "--schema"
    raise SystemExit(run(sys.stdin.read(), Path(os.getcwd()), verdict=verdict))


if __name__ == "__main__":
    main()

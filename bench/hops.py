"""How far a command travels through corral: the modules it reads and the hops from the CLI to the store.

For ``controller renew``, ``ask`` (one relay and collect with the scripted process agent) and one plan
step (the ``review`` example plan), each measured in a fresh interpreter:

- ``modules``: how many ``runner.*`` modules the command imported (what a reader of that path reads);
- ``hops``: at the store write that records the command's transition, the ``runner`` modules on the
  call stack from the CLI entry to the store, consecutive frames of one module counted once
  (``runner.cli.app -> runner.service -> runner.engine.engine -> runner.sql.store_sqlite`` is 3 hops);
- ``frames``: the ``runner`` frames on that stack.

Run from a checkout: ``python bench/hops.py [--json] [--root DIR]`` (``--root`` measures another
checkout, e.g. a worktree of an older commit, so before/after figures come from one run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

PROBE = textwrap.dedent(
    """
    import json, sys, threading
    machine = sys.argv[1]
    argv = json.loads(sys.argv[2])
    before = set(sys.modules)
    seen = []

    def chain(frame):
        names = []
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name.startswith("runner"):
                names.append(name)
            frame = frame.f_back
        names.reverse()
        collapsed = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
        return collapsed, len(names)

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_name != "put":
            return
        if not frame.f_globals.get("__name__", "").startswith("runner.store"):
            return
        instance = frame.f_locals.get("instance")
        if getattr(instance, "machine", None) == machine:
            seen.append(chain(frame))

    sys.setprofile(profile)
    threading.setprofile(profile)
    from runner.cli.app import main
    status = main(argv)
    sys.setprofile(None)
    threading.setprofile(None)
    modules = sorted(m for m in set(sys.modules) - before if m.startswith("runner"))
    longest = max(seen, key=lambda c: len(c[0])) if seen else ([], 0)
    print(json.dumps({"status": status, "modules": len(modules), "hops": max(len(longest[0]) - 1, 0),
                      "frames": longest[1], "chain": longest[0]}))
    """
)

PLAN = """\
plan: hops-review
recipe: review
controller: hops-plan
inputs:
  cwd: {cwd}
  prompt: review this project
  kind: script
  reviewer: reviewer
  timeout: 120
  authority_ref: "hops"
  authority_sha256: "{sha}"
"""

SHA = "0" * 64


def corral(root: Path, env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        cwd=root,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"corral {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def probe(root: Path, env: dict[str, str], machine: str, argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, machine, json.dumps(argv)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"status"')]
    if not lines:
        raise SystemExit(f"probe of {argv} printed nothing: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if result["status"] != 0:
        raise SystemExit(f"corral {' '.join(argv)} exited {result['status']}: {done.stderr.strip()[-2000:]}")
    return result


def measure(root: Path, work: Path) -> dict[str, dict[str, Any]]:
    env = {**os.environ, "CORRAL_HOME": str(work / "home"), "PYTHONPATH": str(root)}
    env.pop("CORRAL_STORE", None)
    env.pop("CORRAL_CONTROLLER", None)
    project = work / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "README.md").write_text("a project to review\n")
    auth = ["--authority-ref", "hops", "--authority-sha256", SHA]
    corral(root, env, "controller", "acquire", "--controller", "hops", "--ttl", "600", *auth)
    results = {"controller renew": probe(root, env, "controller", ["controller", "renew", "--controller", "hops"])}
    corral(root, env, "reviewer", "start", "--controller", "hops", "--name", "r1", "--kind", "script",
           "--cwd", str(project))  # fmt: skip
    results["ask"] = probe(
        root, env, "receipt", ["ask", "r1", "--controller", "hops", "--text", "please review", "--timeout", "60"]
    )
    plan = work / "plan.yaml"
    plan.write_text(PLAN.format(cwd=project, sha=SHA))
    results["plan step"] = probe(root, env, "plan", ["run", str(plan)])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-hops-") as tmp:
        results = measure(args.root.resolve(), Path(tmp))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, found in results.items():
        print(f"{name:18} modules {found['modules']:3}  hops {found['hops']:2}  frames {found['frames']:3}")
        print(f"{'':18} {' -> '.join(found['chain'])}")


if __name__ == "__main__":
    main()

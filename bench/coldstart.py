"""What a cold ``corral controller renew`` process costs, end to end, against a cold ``python -c pass``.

The renew is the whole guarded durable transition as a user runs it: interpreter start, imports, the
credential file, the spec (from the warm spec cache, as after the first command), the fence guard, the
compare-and-set and the event committed with ``synchronous=FULL``, and the output. A real lease is
acquired first in a private ``CORRAL_HOME``; each command is timed with ``time.perf_counter`` around
``subprocess.run``, interleaved over ``--runs`` runs after ``--warmup`` runs, and reported as median
and p90. ``corral --version`` (imports and click, no store) is shown for reference.

Bytecode: the measured runs read compiled bytecode from a private ``PYTHONPYCACHEPREFIX`` (filled by
the warm-up), as an installed corral would, whatever ``PYTHONDONTWRITEBYTECODE`` says; one more row
runs the renew with the environment exactly as given, so the cost of a disabled bytecode cache shows.

Target: the renew's median under 200 ms (``--target-ms``). Then the top imports of
``python -X importtime -m runner.cli controller renew`` by cumulative and by self time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import Cold, corral_executable

CONTROLLER = "bench"
AUTHORITY_SHA = hashlib.sha256(b"bench authority").hexdigest()
TARGET_MS = 200.0
# Imported only to validate, draw or drive agents; a renew that imports one of them has regressed.
HEAVY = ("jsonschema", "referencing", "yaml", "rich", "git", "graphviz", "anyio")
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)\s*$")


def environments(home: Path, pycache: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(with a private bytecode cache, as given); both with a private CORRAL_HOME and no CORRAL_* leaks."""
    given = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_") and k != "XDG_STATE_HOME"}
    given["CORRAL_HOME"] = str(home)
    cached = {k: v for k, v in given.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = str(pycache)
    return cached, given


def acquire(corral: str, env: dict[str, str], home: Path) -> None:
    argv = [corral, "controller", "acquire", "--controller", CONTROLLER, "--ttl", "86400"]
    argv += ["--authority-ref", "BENCH-1", "--authority-sha256", AUTHORITY_SHA]
    subprocess.run(
        argv,
        env=env,
        capture_output=True,
        check=True,
    )
    if not any((home / "cache" / "specs").glob("*.json")):
        raise SystemExit(f"the spec cache under {home} is still empty after acquire: the renews would validate")


def import_times(env: dict[str, str]) -> list[dict[str, Any]]:
    """Every import of one ``-X importtime`` renew: name, self and cumulative µs, nesting depth."""
    argv = [sys.executable, "-X", "importtime", "-m", "runner.cli", "controller", "renew", "--controller", CONTROLLER]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the importtime renew failed with status {done.returncode}:\n{done.stderr}")
    found = []
    for line in done.stderr.splitlines():
        match = IMPORT_LINE.match(line)
        if match:
            own, cumulative, indent, name = match.groups()
            depth = len(indent) // 2
            found.append({"name": name, "self_us": int(own), "cumulative_us": int(cumulative), "depth": depth})
    return found


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    home, pycache = tmp / "home", tmp / "pycache"
    cached, given = environments(home, pycache)
    corral = corral_executable()
    acquire(corral, cached, home)
    renew = [corral, "controller", "renew", "--controller", CONTROLLER]
    bytecode_off = bool(given.get("PYTHONDONTWRITEBYTECODE")) and not given.get("PYTHONPYCACHEPREFIX")
    commands = [
        Cold("python_pass", "python -c pass", [sys.executable, "-c", "pass"], cached),
        Cold("version", "corral --version", [corral, "--version"], cached),
        Cold("renew", "corral controller renew", renew, cached),
        Cold(
            "renew_env_as_given",
            "renew, env as given" + (" (PYTHONDONTWRITEBYTECODE)" if bytecode_off else ""),
            renew,
            given,
        ),
    ]
    for _ in range(args.warmup):
        for command in commands:
            command.run()
    for index in range(args.runs):
        for command in commands if index % 2 == 0 else commands[::-1]:
            command.samples_ms.append(command.run())
    imports = import_times(cached)
    by_key = {c.key: c for c in commands}
    renew_median = by_key["renew"].median
    return {
        "context": {
            "python": platform.python_version(),
            "executable": sys.executable,
            "corral": corral,
            "runs": args.runs,
            "warmup_runs": args.warmup,
            "corral_home": str(home),
            "bytecode": f"cached in a private PYTHONPYCACHEPREFIX ({pycache})",
            "env_disables_bytecode": bytecode_off,
        },
        "commands": {c.key: c.to_dict() for c in commands},
        "renew_minus_python_ms": round(renew_median - by_key["python_pass"].median, 2),
        "renew_minus_version_ms": round(renew_median - by_key["version"].median, 2),
        "target_ms": args.target_ms,
        "target_met": renew_median < args.target_ms,
        "imports": {
            "count": len(imports),
            "total_self_us": sum(i["self_us"] for i in imports),
            "top_cumulative": sorted(imports, key=lambda i: -i["cumulative_us"])[: args.top],
            "top_self": sorted(imports, key=lambda i: -i["self_us"])[: args.top],
            "heavy_imported": sorted({i["name"] for i in imports if i["name"].split(".")[0] in HEAVY}),
        },
    }


def render(doc: dict[str, Any]) -> str:
    ctx, commands = doc["context"], doc["commands"]
    lines = [
        f"corral cold start: Python {ctx['python']}, {ctx['runs']} interleaved runs per command after "
        f"{ctx['warmup_runs']} warm-up runs",
        f"  lease acquired in {ctx['corral_home']}; spec cache warm; bytecode {ctx['bytecode']}",
        "",
        f"  {'':46} {'median ms':>10} {'p90 ms':>8} {'min ms':>8}",
    ]
    for command in commands.values():
        lines.append(
            f"  {command['label']:46} {command['median_ms']:10.1f} {command['p90_ms']:8.1f} {command['min_ms']:8.1f}"
        )
    met = "met" if doc["target_met"] else "NOT met"
    lines += [
        "",
        f"  renew - python -c pass:   {doc['renew_minus_python_ms']:6.1f} ms  (corral's own cost of the transition)",
        f"  renew - corral --version: {doc['renew_minus_version_ms']:6.1f} ms  (beyond importing the CLI)",
        f"  renew median {commands['renew']['median_ms']:.1f} ms vs target < {doc['target_ms']:g} ms: {met}",
    ]
    imports = doc["imports"]
    lines += [
        "",
        f"  imports of `python -X importtime -m runner.cli controller renew`: {imports['count']} modules, "
        f"{imports['total_self_us'] / 1000:.1f} ms in all (importtime inflates it)",
        f"  {'top by cumulative':38} {'cum ms':>7} {'self ms':>8}    {'top by self':38} {'self ms':>8}",
    ]
    for by_cum, by_self in zip(imports["top_cumulative"], imports["top_self"], strict=False):
        lines.append(
            f"  {by_cum['name']:38} {by_cum['cumulative_us'] / 1000:7.1f} {by_cum['self_us'] / 1000:8.1f}"
            f"    {by_self['name']:38} {by_self['self_us'] / 1000:8.1f}"
        )
    heavy = imports["heavy_imported"]
    lines.append(f"  modules a renew should not need ({', '.join(HEAVY)}): {', '.join(heavy) if heavy else 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="timed runs per command (default: 21)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per command first (default: 3)")
    parser.add_argument("--target-ms", type=float, default=TARGET_MS, help="renew median target (default: 200)")
    parser.add_argument("--top", type=int, default=10, help="how many imports to list (default: 10)")
    parser.add_argument("--dir", type=Path, help="where to put the state home (default: a new temp directory)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 1 or args.top < 1:
        parser.error("--runs, --warmup and --top must be >= 1 (the warm-up fills the bytecode cache)")
    with tempfile.TemporaryDirectory(prefix="corral-coldstart-", dir=args.dir) as tmp:
        doc = measure(args, Path(tmp))
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

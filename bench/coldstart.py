"""What a cold ``corral`` process costs, verb by verb, against a cold ``python -c pass``.

The figure of issue 13 is ``controller renew``: the whole guarded durable transition as a user runs
it (interpreter start, imports, the credential file, the spec from the warm spec cache, the fence
guard, the compare-and-set and the event committed with ``synchronous=FULL``, the output). Every
other read-only or cheap verb (``--version``, ``machines``, ``validate``, ``status``, listings,
``events``, ``scopes check``, ``preflight``, ``paths`` …) is run for real too, and each is reported
as a ratio to ``python -c pass`` measured in the same run.

Each corral checkout measured (``--root``, default this one; ``--baseline ROOT`` adds another, e.g.
``--baseline /work/main`` for the code before a change) gets its own private ``CORRAL_HOME``
prepared by its own code: a real lease acquired (which warms the spec cache, as after a user's first
command), a linked git worktree for ``preflight``. Commands run as the console script does
(``from runner.cli import run``) with ``PYTHONPATH`` set to the checkout and the working directory
in the temporary directory (no local ``./machines``). Every command line runs in a fresh process,
timed with ``time.perf_counter`` around ``subprocess.run``, interleaved (the order reversed every
other round, checkouts alternating) so that drift on a shared machine hits all alike; medians. Each
process's CPU time (user + system) is recorded as well: on a machine whose cores are shared, the wall
time includes waiting for a core and the CPU ratio is the steadier one (the figure is the wall's).

Bytecode: every checkout is compiled first into a private ``PYTHONPYCACHEPREFIX``, as an installed
corral is, whatever ``PYTHONDONTWRITEBYTECODE`` says.

Then the imports of ``python -X importtime`` renews: the top modules by cumulative and by self
time, the self time summed by origin (stdlib, click, corral, other), and the modules a renew must
never need (``HEAVY``). ``-X importtime`` does not see a module imported through
``importlib.import_module`` (the lazy command group's and the service's PEP 562 names), so these renews
route ``import_module`` through ``__import__``, which it sees. And one renew counts the dataclasses it
creates, with the time ``dataclasses`` spends making them (a frozen dataclass costs most of a
millisecond per process: it compiles its methods when its module is imported).

``python -c 'import click, json, …'`` (``FLOOR``: click and the standard library a renew needs) is timed
in every round too: the part of the ratio corral's own code cannot remove.

``--quick`` (a few seconds, for ``bench/summary.py``): fewer runs, each non-figure verb in three of them
(its median: the slowest verb's figure is a maximum, which single samples would bias upward).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import Cold

HERE = Path(__file__).resolve().parents[1]
CONTROLLER = "bench"
AUTHORITY_SHA = hashlib.sha256(b"bench authority").hexdigest()
TARGET_RATIO = 6.0
FIGURE = "cold corral controller renew / cold python -c pass"
VERB_TARGET_RATIO = 10.0
VERB_FIGURE = "slowest cold corral verb / cold python -c pass"
SLOWEST = 3  # the slowest verbs whose imports are listed
# Imported only to validate, draw, render listings or drive agents; a renew that imports one has regressed.
HEAVY = (
    "jsonschema",
    "referencing",
    "yaml",
    "rich",
    "git",
    "graphviz",
    "anyio",
    "asyncio",
    "logging",
    "socket",
    "importlib.metadata",
    "email",
    "transitions",
    "six",
)
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)\s*$")
# The console script's own code (the venv's ``corral`` may point at another checkout).
SCRIPT = "import sys; from runner.cli import run; sys.argv[0] = 'corral'; sys.exit(run())"
# For -X importtime: lazy imports go through ``__import__``, which importtime reports (import_module is not).
IMPORTTIME_SCRIPT = (
    "import importlib, sys\n"
    "_module = importlib.import_module\n"
    "def _seen(name, package=None):\n"
    "    if package is None and not name.startswith('.'):\n"
    "        return __import__(name, fromlist=['_'])\n"
    "    return _module(name, package)\n"
    "importlib.import_module = _seen\n" + SCRIPT.replace("; ", "\n")
)
# One renew with every dataclass creation timed (``dataclasses._process_class``), reported on stderr.
DATACLASS_SCRIPT = (
    "import dataclasses, json, sys, time\n"
    "_process, _made = dataclasses._process_class, []\n"
    "def _timed(cls, *args, **kwargs):\n"
    "    start = time.perf_counter()\n"
    "    try:\n"
    "        return _process(cls, *args, **kwargs)\n"
    "    finally:\n"
    "        _made.append((cls.__module__, time.perf_counter() - start))\n"
    "dataclasses._process_class = _timed\n"
    "import atexit\n"
    "atexit.register(lambda: print('DATACLASSES ' + json.dumps(_made), file=sys.stderr))\n" + SCRIPT.replace("; ", "\n")
)
# Click and the standard library modules a renew cannot do without: the floor under corral's own imports.
FLOOR = "import click, json, pathlib, sqlite3, hashlib, secrets, datetime, typing, dataclasses, re, fcntl, threading"

# (key, argv after ``corral``): read-only or cheap verbs, each run for real against the prepared home.
VERBS: list[tuple[str, list[str]]] = [
    ("version", ["--version"]),
    ("help", ["--help"]),
    ("renew", ["controller", "renew", "--controller", CONTROLLER]),
    ("renew_json", ["controller", "renew", "--controller", CONTROLLER, "--json"]),
    ("controller_list", ["controller", "list"]),
    ("controller_list_json", ["controller", "list", "--json"]),
    ("machines", ["machines"]),
    ("validate", ["validate"]),
    ("status", ["status"]),
    ("events", ["events", "--limit", "50"]),
    ("receipts", ["receipts"]),
    ("reviewer_list", ["reviewer", "list"]),
    ("writer_list", ["writer", "list"]),
    ("adopted_list", ["adopted", "list"]),
    ("agents", ["agents"]),
    ("plans_list", ["plans", "list"]),
    ("recipe_list", ["recipe", "list"]),
    ("scopes_check", ["scopes", "check", "src/a", "--worktree", "{worktree}"]),
    ("preflight", ["preflight", "{worktree}"]),
    ("paths", ["paths", "controller"]),
    ("draw", ["draw", "controller"]),
    ("check", ["check", "controller"]),
    ("recipe_show", ["recipe", "show", "review"]),
    ("memory_list", ["memory", "list"]),
    ("mesh_agents", ["mesh", "agents"]),
    ("store_info", ["store", "info"]),
    ("mcp_config", ["mcp", "config", "--client", "claude-code"]),
]
FIGURE_VERBS = ("version", "renew")  # measured every round even with --quick


@dataclass
class CpuCold(Cold):
    """A :class:`Cold` command that also records the CPU time (user + system) its process used.

    On a shared machine the wall time of a process includes the time it waited for a core; its CPU
    time does not, so the CPU ratio is the steadier of the two (both are reported; the figure is the
    wall's, as a user waits for it)."""

    cpu_samples_ms: list[float] = field(default_factory=list)
    last_cpu_ms: float = 0.0

    def run(self) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        elapsed = super().run()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.last_cpu_ms = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
        return elapsed

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_samples_ms)

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | {"cpu_median_ms": round(self.cpu_median, 2)}


def environment(root: Path, home: Path, pycache: Path) -> dict[str, str]:
    """This environment with a private CORRAL_HOME and bytecode cache, corral from ``root``, no CORRAL_* leaks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_") and k != "XDG_STATE_HOME"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env |= {"CORRAL_HOME": str(home), "PYTHONPYCACHEPREFIX": str(pycache), "PYTHONPATH": str(root)}
    return env


def run_ok(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with status {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


class Checkout:
    """One corral checkout under test: its home, its bytecode, its verbs."""

    def __init__(self, label: str, root: Path, tmp: Path, worktree: Path) -> None:
        self.label, self.root = label, root
        base = tmp / label
        self.home, self.pycache = base / "home", base / "pycache"
        self.env = environment(root, self.home, self.pycache)
        self.worktree = worktree
        self.verbs = {
            key: CpuCold(
                key,
                "corral " + " ".join(argv),
                [sys.executable, "-c", SCRIPT, *(a.format(worktree=worktree) for a in argv)],
                self.env,
            )
            for key, argv in VERBS
        }

    def prepare(self, cwd: Path) -> None:
        self.home.parent.mkdir(parents=True)
        # Compiled bytecode for every module, as an installed corral has (and click's, from the venv).
        run_ok([sys.executable, "-m", "compileall", "-q", str(self.root / "runner")], self.env, cwd)
        argv = [sys.executable, "-c", SCRIPT, "controller", "acquire", "--controller", CONTROLLER, "--ttl", "86400"]
        run_ok([*argv, "--authority-ref", "BENCH-1", "--authority-sha256", AUTHORITY_SHA], self.env, cwd)
        if not any((self.home / "cache" / "specs").glob("*.json")):
            raise SystemExit(f"the spec cache under {self.home} is still empty after acquire: renews would validate")
        for command in self.verbs.values():  # fills the bytecode of what the console script imports lazily
            command.run()

    def import_times(self, cwd: Path, verb: list[str] | None = None) -> list[dict[str, Any]]:
        """Every import of one ``-X importtime`` run of ``verb`` (default: a renew): name, self and
        cumulative µs, nesting depth."""
        renew = verb or ["controller", "renew", "--controller", CONTROLLER]
        argv = [sys.executable, "-X", "importtime", "-c", IMPORTTIME_SCRIPT, *renew]
        done = subprocess.run(argv, env=self.env, cwd=cwd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the importtime run of {renew} failed with status {done.returncode}:\n{done.stderr}")
        found = []
        for line in done.stderr.splitlines():
            match = IMPORT_LINE.match(line)
            if match:
                own, cumulative, indent, name = match.groups()
                found.append(
                    {"name": name, "self_us": int(own), "cumulative_us": int(cumulative), "depth": len(indent) // 2}
                )
        return found

    def dataclasses_made(self, cwd: Path) -> dict[str, Any]:
        """The dataclasses one renew creates: how many, the time spent making them, by module."""
        argv = [sys.executable, "-c", DATACLASS_SCRIPT, "controller", "renew", "--controller", CONTROLLER]
        done = subprocess.run(argv, env=self.env, cwd=cwd, capture_output=True, text=True, check=False)
        lines = [line for line in done.stderr.splitlines() if line.startswith("DATACLASSES ")]
        if done.returncode != 0 or not lines:
            raise SystemExit(f"the dataclass-counting renew failed with status {done.returncode}:\n{done.stderr}")
        made = json.loads(lines[-1].removeprefix("DATACLASSES "))
        by_module: dict[str, list[float]] = {}
        for module, seconds in made:
            by_module.setdefault(module, []).append(seconds)
        ranked = sorted(by_module.items(), key=lambda item: -sum(item[1]))
        return {
            "count": len(made),
            "ms": round(sum(seconds for _, seconds in made) * 1000, 1),
            "by_module": [{"module": m, "count": len(t), "ms": round(sum(t) * 1000, 2)} for m, t in ranked],
        }


def origin(module: str) -> str:
    top = module.split(".", maxsplit=1)[0]
    if top == "runner":
        return "corral"
    if top == "click":
        return "click"
    if top in sys.stdlib_module_names or top.startswith("_") or top in ("encodings", "sitecustomize"):
        return "stdlib"
    return "other"


def by_package(found: list[dict[str, Any]]) -> dict[str, float]:
    """The self time of one importtime run summed by top-level package, the heaviest first (ms)."""
    total: dict[str, float] = {}
    for item in found:
        top = item["name"].split(".", maxsplit=1)[0]
        total[top] = total.get(top, 0.0) + item["self_us"] / 1000
    return {name: round(ms, 1) for name, ms in sorted(total.items(), key=lambda kv: -kv[1])}


def import_summary(runs: list[list[dict[str, Any]]], top: int) -> dict[str, Any]:
    """The median self time of each module over ``runs`` importtime renews, grouped and ranked."""
    names = {i["name"] for run in runs for i in run}
    own = {n: statistics.median([next((i["self_us"] for i in r if i["name"] == n), 0) for r in runs]) for n in names}
    cum = {
        n: statistics.median([next((i["cumulative_us"] for i in r if i["name"] == n), 0) for r in runs]) for n in names
    }
    by_origin: dict[str, float] = {}
    for name, us in own.items():
        by_origin[origin(name)] = by_origin.get(origin(name), 0) + us
    ranked_cum, ranked_own = sorted(cum, key=cum.__getitem__)[::-1], sorted(own, key=own.__getitem__)[::-1]
    return {
        "count": len(names),
        "total_self_ms": round(sum(own.values()) / 1000, 1),
        "self_ms_by_origin": {k: round(v / 1000, 1) for k, v in sorted(by_origin.items())},
        "top_cumulative": [{"name": n, "ms": round(cum[n] / 1000, 1)} for n in ranked_cum[:top]],
        "top_self": [{"name": n, "ms": round(own[n] / 1000, 1)} for n in ranked_own[:top]],
        "heavy_imported": sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY)),
        "modules": sorted(names),
    }


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    os.chdir(tmp)  # no ./machines or ./.corral of the caller's checkout
    worktree = tmp / "lane"
    repo = tmp / "repo"
    run_ok(["git", "init", "-q", str(repo)], dict(os.environ), tmp)
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    run_ok(["git", *ident, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"], dict(os.environ), tmp)
    run_ok(["git", "-C", str(repo), "worktree", "add", "-q", "-b", "lane", str(worktree)], dict(os.environ), tmp)
    checkouts = [Checkout("after", args.root, tmp, worktree)]
    if args.baseline is not None:
        checkouts.insert(0, Checkout("before", args.baseline, tmp, worktree))
    python = CpuCold("python_pass", "python -c pass", [sys.executable, "-c", "pass"], checkouts[-1].env)
    floor_cmd = CpuCold("floor", "python -c 'import click, …'", [sys.executable, "-c", FLOOR], checkouts[-1].env)
    for checkout in checkouts:
        checkout.prepare(tmp)
    for _ in range(args.warmup):
        python.run()
        for checkout in checkouts:
            for key in FIGURE_VERBS:
                checkout.verbs[key].run()
    for index in range(args.runs):
        every = not args.quick or index < args.verb_runs
        commands = [python]
        for checkout in checkouts:
            commands += [c for k, c in checkout.verbs.items() if every or k in FIGURE_VERBS]
            commands.append(python)  # python -c pass as often as the figure's renews, spread among them
        commands.append(floor_cmd)
        for command in commands if index % 2 == 0 else commands[::-1]:
            command.samples_ms.append(command.run())
            command.cpu_samples_ms.append(command.last_cpu_ms)
    floor = python.median
    verbs: list[dict[str, Any]] = []
    for key, argv in VERBS:
        row: dict[str, Any] = {"verb": key, "argv": ["corral", *argv], "runs": {}}
        for checkout in checkouts:
            command = checkout.verbs[key]
            row[f"{checkout.label}_median_ms"] = round(command.median, 2)
            row[f"{checkout.label}_ratio"] = round(command.median / floor, 2)
            row[f"{checkout.label}_cpu_ms"] = round(command.cpu_median, 2)
            row[f"{checkout.label}_cpu_ratio"] = round(command.cpu_median / python.cpu_median, 2)
            row["runs"][checkout.label] = len(command.samples_ms)
        verbs.append(row)
    renew = {c.label: c.verbs["renew"] for c in checkouts}
    ratio = renew["after"].median / floor
    detail = (
        f"renew median {renew['after'].median:.1f} ms / python -c pass median {floor:.1f} ms "
        f"({len(renew['after'].samples_ms)} and {len(python.samples_ms)} runs)"
    )
    if "before" in renew:
        detail += (
            f"; before ({args.baseline}): renew {renew['before'].median:.1f} ms = "
            f"{renew['before'].median / floor:.2f}x in the same run"
        )
    cpu_floor = python.cpu_median
    detail += (
        f"; CPU time (user + system): renew {renew['after'].cpu_median:.1f} ms / python -c pass {cpu_floor:.1f} ms = "
    )
    detail += f"{renew['after'].cpu_median / cpu_floor:.2f}x"
    if "before" in renew:
        detail += f" (before: {renew['before'].cpu_median:.1f} ms = {renew['before'].cpu_median / cpu_floor:.2f}x)"
    detail += (
        f"; click and the stdlib a renew needs (python -c 'import click, json, ...'): {floor_cmd.median:.1f} ms = "
        f"{floor_cmd.median / floor:.2f}x (CPU {floor_cmd.cpu_median / cpu_floor:.2f}x)"
    )
    detail += "; every verb: " + ", ".join(f"{r['verb']} {r['after_ratio']:.1f}x" for r in verbs)
    figures = [
        {
            "figure": FIGURE,
            "value": round(ratio, 2),
            "unit": "x",
            "target": f"<= {args.target_ratio:g}x",
            "met": ratio <= args.target_ratio,
            "detail": detail,
        }
    ]
    slowest = sorted(verbs, key=lambda r: -r["after_ratio"])[:SLOWEST]
    after = checkouts[-1]
    for row in slowest:
        argv = [a.format(worktree=worktree) for a in dict(VERBS)[row["verb"]]]
        row["imports_by_package_ms"] = by_package(after.import_times(tmp, argv))
    worst = slowest[0]
    figures.append(
        {
            "figure": VERB_FIGURE,
            "value": worst["after_ratio"],
            "unit": "x",
            "target": f"<= {VERB_TARGET_RATIO:g}x",
            "met": worst["after_ratio"] <= VERB_TARGET_RATIO,
            "detail": "slowest: "
            + "; ".join(
                f"{' '.join(r['argv'][1:])} {r['after_ratio']:.1f}x importing "
                + ", ".join(f"{name} {ms:.1f} ms" for name, ms in list(r["imports_by_package_ms"].items())[:5])
                for r in slowest
            ),
        }
    )
    imports = {}
    for checkout in checkouts:
        runs = [checkout.import_times(tmp) for _ in range(args.import_runs)]
        imports[checkout.label] = import_summary(runs, args.top) | {"dataclasses": checkout.dataclasses_made(tmp)}
    return {
        "figures": figures,
        "verbs": verbs,
        "context": {
            "python": platform.python_version(),
            "executable": sys.executable,
            "roots": {c.label: str(c.root) for c in checkouts},
            "runs": args.runs,
            "verb_runs": args.verb_runs if args.quick else args.runs,
            "warmup_runs": args.warmup,
            "quick": args.quick,
            "bytecode": "compiled into a private PYTHONPYCACHEPREFIX per checkout",
        },
        "commands": {"python_pass": python.to_dict(), "floor": floor_cmd.to_dict()}
        | {f"{c.label}:{k}": v.to_dict() for c in checkouts for k, v in c.verbs.items()},
        "imports": imports,
    }


def render(doc: dict[str, Any]) -> str:
    ctx = doc["context"]
    labels = list(ctx["roots"])
    floor = doc["commands"]["python_pass"]["median_ms"]
    lines = [
        f"corral cold start: Python {ctx['python']}, {ctx['runs']} interleaved rounds "
        f"(non-figure verbs {ctx['verb_runs']}) after {ctx['warmup_runs']} warm-up rounds",
        *(f"  {label}: {root}" for label, root in ctx["roots"].items()),
        f"  python -c pass: median {floor:.1f} ms",
        "  click and the stdlib a renew needs (python -c 'import click, json, …'): median "
        f"{doc['commands']['floor']['median_ms']:.1f} ms = {doc['commands']['floor']['median_ms'] / floor:.2f}x",
        "",
        f"  {'verb':48}" + "".join(f" {label + ' ms':>10} {'ratio':>6} {'cpu':>6}" for label in labels),
    ]
    for row in doc["verbs"]:
        cells = "".join(
            f" {row[f'{label}_median_ms']:10.1f} {row[f'{label}_ratio']:5.1f}x {row[f'{label}_cpu_ratio']:5.1f}x"
            for label in labels
        )
        lines.append(f"  {' '.join(row['argv'][1:]):48}{cells}")
    lines.append("")
    for figure in doc["figures"]:
        met = "met" if figure["met"] else "NOT met"
        lines.append(f"  {figure['figure']}: {figure['value']:.2f}x, target {figure['target']}: {met}")
    lines += ["", f"  the {SLOWEST} slowest verbs and what they import (self time by package, one -X importtime run):"]
    for row in sorted(doc["verbs"], key=lambda r: -r["after_ratio"])[:SLOWEST]:
        heavy = ", ".join(f"{name} {ms:.1f}" for name, ms in list(row.get("imports_by_package_ms", {}).items())[:6])
        lines.append(f"  {' '.join(row['argv'][1:]):40} {row['after_ratio']:5.1f}x  {heavy}")
    for label, imports in doc["imports"].items():
        by_origin = ", ".join(f"{k} {v:.1f}" for k, v in imports["self_ms_by_origin"].items())
        lines += [
            "",
            f"  {label}: imports of an importtime renew: {imports['count']} modules, {imports['total_self_ms']:.1f} ms "
            f"self in all (importtime inflates it): {by_origin}",
            f"  {'top by cumulative':38} {'cum ms':>7}    {'top by self':38} {'self ms':>8}",
        ]
        for by_cum, by_self in zip(imports["top_cumulative"], imports["top_self"], strict=False):
            lines.append(f"  {by_cum['name']:38} {by_cum['ms']:7.1f}    {by_self['name']:38} {by_self['ms']:8.1f}")
        made = imports["dataclasses"]
        top_made = ", ".join(f"{m['module']} {m['count']}" for m in made["by_module"][:6])
        lines.append(f"  dataclasses a renew creates: {made['count']} ({made['ms']:.1f} ms making them): {top_made}")
        heavy = imports["heavy_imported"]
        lines.append(f"  modules a renew should not need: {', '.join(heavy) if heavy else 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="timed rounds (default: 9; --quick: 5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds of the figure's verbs (default: 2)")
    parser.add_argument("--quick", action="store_true", help="a run of a few seconds: each non-figure verb three times")
    parser.add_argument("--root", type=Path, default=HERE, help="the corral checkout to measure (default: this one)")
    parser.add_argument("--baseline", type=Path, help="another checkout measured in the same run, as 'before'")
    parser.add_argument("--target-ratio", type=float, default=TARGET_RATIO, help="renew / python target (6)")
    parser.add_argument("--top", type=int, default=10, help="how many imports to list (default: 10)")
    parser.add_argument("--dir", type=Path, help="where to put the state homes (default: a new temp directory)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.warmup = min(args.runs, 5), min(args.warmup, 1)
    # Every verb in 3 of --quick's rounds: the slowest verb's figure is a maximum over the verbs'
    # medians, and a maximum over single samples on a shared machine is a maximum of noise.
    args.verb_runs = 3
    args.import_runs = 1 if args.quick else 3
    if args.runs < 1 or args.warmup < 0 or args.top < 1:
        parser.error("--runs and --top must be >= 1, --warmup >= 0")
    for root in (args.root, args.baseline):
        if root is not None and not (root / "runner" / "cli" / "app.py").is_file():
            parser.error(f"{root} is not a corral checkout (no runner/cli/app.py)")
    args.root = args.root.resolve()
    args.baseline = args.baseline.resolve() if args.baseline else None
    with tempfile.TemporaryDirectory(prefix="corral-coldstart-", dir=args.dir) as tmp:
        doc = measure(args, Path(tmp).resolve())
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

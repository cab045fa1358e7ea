"""The lane-conflict check of ``writer start`` with 100 live lanes x 500 owned + 500 locked scopes.

Issue 13's first target: the check takes < 50 ms and no write transaction holds the store's lock
longer than 50 ms for it. On a real SQLite file (the store's pragmas: WAL, ``synchronous=FULL``) the
benchmark writes ``--lanes`` live writer lanes of one repository, each in its own worktree and branch,
owning ``--scopes`` file scopes and locking as many (four directories deep), as ``writer start``
records them (their claims too, where the code keeps a claim index). Then, ``--runs`` times, one
write transaction does what ``writer start``'s first phase does for the conflict rule: it runs the
registered ``lane_conflicts`` guard on a new lane with as many scopes of its own (disjoint from every
other lane's, so every scope is checked: the worst case for a passing start), records the lane (its
row and, where kept, its claims) and commits. Timed: the guard alone; the lock held for the work,
from ``BEGIN IMMEDIATE`` up to ``COMMIT``; and with ``COMMIT`` (its fsync, which any durable write
pays and which varies with the disk, so it is reported beside the figure, not in it). The figure is
the worse of the guard's and the work's maxima. Each new lane is then moved to ``released`` in an
untimed transaction, so every run sees the same live lanes.

The same measurement runs on another checkout with ``--before DIR`` (default: ``/work/main`` when it
exists and is not this checkout), in a child process whose ``PYTHONPATH`` is that checkout: the
pre-index figure, from the same run.

A second figure, the scope audit of ``writer release`` and ``writer audit``
(:func:`runner.git.audit.audit`): a linked worktree of ``--audit-files`` tracked files (10,000 by
default) with ``--audit-changes`` changes since its base (a few hundred: a commit, staged and
unstaged edits, renames, deletions, untracked files), audited ``--runs`` times; the median is the
figure (target < 200 ms), measured on the checkout given by ``--root``.

A second figure: the process host's Bubblewrap confinement (``runner.sandbox.confine``), its start-up
cost per agent run: the median of ``--confine-runs`` starts of a trivial command (``true``) confined
as a writer owning one scope of a git worktree, minus the median of as many unconfined starts
(target < 30 ms). Skipped, and said so, where Bubblewrap cannot start.

Run from a checkout: ``python bench/lanes.py [--quick] [--json] [--before DIR | --no-before]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIGURE = "lane-conflict check, 100 lanes x 500 owned + 500 locked scopes"
TARGET_MS = 50.0
AUDIT_FIGURE = "scope audit, a 10,000-file worktree with a few hundred changes"
AUDIT_TARGET_MS = 200.0
REPO = "/bench/repo/.git"


def _scopes(prefix: str, kind: str, n: int) -> list[str]:
    return sorted(f"{prefix}/{kind}/d{j // 50}/f{j}.py" for j in range(n))


def _lane_data(name: str, owned: list[str], locked: list[str]) -> dict[str, Any]:
    return {
        "controller_id": "bench",
        "name": name,
        "kind": "script",
        "cwd": f"/bench/wt/{name}",
        "worktree": f"/bench/wt/{name}",
        "common_dir": REPO,
        "branch": name,
        "owned_scopes": owned,
        "locked_scopes": locked,
        "protected_branches": ["main"],
    }


def _claims(tx: Any, lane_id: str, data: dict[str, Any]) -> None:
    """The claims ``record_writer_lane`` declares, where this checkout keeps a claim index."""
    from runner import scopes

    if hasattr(tx, "set_claims"):
        tx.set_claims(
            lane_id,
            scopes.lane_claims(
                data["common_dir"], data["branch"], data["cwd"], data["owned_scopes"], data["locked_scopes"]
            ),
        )


def measure(directory: Path, lanes: int, scopes_per_kind: int, runs: int, warmup: bool = True) -> dict[str, Any]:
    """Run in the checkout on ``sys.path``: the timings of ``runs`` conflict-checked starts."""
    from runner.context import Context, Instance
    from runner.guards import GUARDS
    from runner.sql.store_sqlite import SQLiteStore

    guard = GUARDS.get("lane_conflicts")
    assert guard is not None
    store = SQLiteStore(directory / "corral.db")
    with store.write() as tx:
        for i in range(lanes):
            name = f"l{i:03d}"
            data = _lane_data(name, _scopes(name, "src", scopes_per_kind), _scopes(name, "docs", scopes_per_kind))
            tx.put(Instance(f"writer/{name}", "writer", "absent", 0, {}), "active", data)
            _claims(tx, f"writer/{name}", data)
    checks: list[float] = []
    works: list[float] = []
    holds: list[float] = []
    for run in range(runs + 1 if warmup else runs):  # a first run warms the caches up and is not counted
        name = f"new{run:03d}"
        owned, locked = _scopes(name, "src", scopes_per_kind), _scopes(name, "docs", scopes_per_kind)
        facts = {"realpath": f"/bench/wt/{name}", "common_dir": REPO, "branch": name}
        params = {"owned_scopes": owned, "locked_scopes": locked}
        start = time.perf_counter()
        with store.write() as tx:
            before = Instance(f"writer/{name}", "writer", "absent", 0, {})
            ctx = Context(before, "start", params, {}, {"git": facts}, tx.now, tx, "bench", {})
            checked = time.perf_counter()
            refused = guard.fn(ctx)
            check_ms = (time.perf_counter() - checked) * 1000
            assert refused is None, refused
            data = _lane_data(name, owned, locked)
            after = tx.put(before, "provisioning", data)
            _claims(tx, after.id, data)
            work_ms = (time.perf_counter() - start) * 1000
        hold_ms = (time.perf_counter() - start) * 1000
        with store.write() as tx:  # untimed: the next run sees the same live lanes
            tx.put(after, "released", data)
            if hasattr(tx, "set_claims"):
                tx.set_claims(after.id, ())
        if run or not warmup:
            checks.append(check_ms)
            works.append(work_ms)
            holds.append(hold_ms)
    store.close()
    return {
        "lanes": lanes,
        "scopes_per_kind": scopes_per_kind,
        "runs": runs,
        "check_ms": [round(x, 3) for x in checks],
        "work_ms": [round(x, 3) for x in works],
        "hold_ms": [round(x, 3) for x in holds],
        "check_median_ms": round(statistics.median(checks), 3),
        "check_max_ms": round(max(checks), 3),
        "work_median_ms": round(statistics.median(works), 3),
        "work_max_ms": round(max(works), 3),
        "hold_median_ms": round(statistics.median(holds), 3),
        "hold_max_ms": round(max(holds), 3),
    }


def _child(root: Path, work: Path, lanes: int, scopes_per_kind: int, runs: int, warmup: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(root), "CORRAL_HOME": str(work / "home")}
    argv = [sys.executable, str(HERE / "lanes.py"), "--child", str(work)]
    argv += ["--lanes", str(lanes), "--scopes", str(scopes_per_kind), "--runs", str(runs)]
    argv += [] if warmup else ["--no-warmup"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, cwd=root)
    if done.returncode != 0:
        raise SystemExit(f"measuring {root} failed:\n{done.stdout}{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def measure_audit(root: Path, work: Path, files: int, changes: int, runs: int) -> dict[str, Any]:
    """Median and max of :func:`runner.git.audit.audit` (of checkout ``root``) on a worktree of ``files``
    tracked files with ``changes`` changes of every source since its base."""
    sys.path.insert(0, str(root))
    from runner.git.audit import audit

    repo, wt = work / "repo", work / "wt"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for i in range(files):
        path = repo / "src" / f"d{i // 100}" / f"f{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"x = {i}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "worktree", "add", "-q", "-b", "feat", str(wt))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=wt, capture_output=True, text=True, check=True)
    base = head.stdout.strip()
    share = max(changes // 5, 1)
    for i in range(share):  # committed since base, in and out of the owned scope
        (wt / "src" / f"d{i % 50}" / f"f{i * 7 % files}.py").write_text("committed\n")
    (wt / "outside.txt").write_text("outside\n")
    _git(wt, "add", "-A")
    _git(wt, "commit", "-q", "-m", "work")
    for i in range(share):  # staged renames, unstaged edits, deletions, untracked files
        _git(wt, "mv", f"src/d{50 + i % 40}/f{(50 + i % 40) * 100 + i // 40}.py", f"src/moved{i}.py")
        (wt / "src" / f"d{90 + i % 10}" / f"f{(90 + i % 10) * 100 + i // 10}.py").write_text("edited\n")
        (wt / "src" / "d1" / f"f{100 + i}.py").unlink(missing_ok=True)
        (wt / "src" / f"new{i}.py").write_text("new\n")
    owned, times = ["src"], []
    found = audit(str(wt), base, owned, [])  # warm the file system cache
    for _ in range(runs):
        started = time.perf_counter()
        found = audit(str(wt), base, owned, [])
        times.append((time.perf_counter() - started) * 1000)
    return {
        "files": files,
        "changes": len(found.changes),
        "violations": len(found.violations),
        "runs": runs,
        "median_ms": round(statistics.median(times), 2),
        "max_ms": round(max(times), 2),
    }


CONFINE_FIGURE = "confinement start-up per agent run (bwrap, writer), median over unconfined"
CONFINE_TARGET_MS = 30.0


def measure_confinement(root: Path, runs: int) -> dict[str, Any] | None:
    """Median wall time of ``true`` unconfined and confined (None: Bubblewrap cannot start here)."""
    sys.path.insert(0, str(root))
    from runner.sandbox import confine
    from runner.sandbox.bwrap import SandboxUnavailableError

    try:
        binary = confine.probe()
    except SandboxUnavailableError as exc:
        return {"skipped": exc.message}
    true = subprocess.run(["which", "true"], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="corral-bench-confine-") as tmp:
        repo = Path(tmp) / "repo"
        (repo / "src").mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        rules = confine.Confinement(role="writer", cwd=str(repo), owned=("src",), locked=("src/vendor",))

        def timed(confined: bool) -> float:
            started = time.perf_counter()
            argv = confine.wrap(binary, rules, [true])[0] if confined else [true]
            subprocess.run(argv, cwd=repo, check=True)
            return (time.perf_counter() - started) * 1000

        for confined in (False, True):  # warm the page cache and bwrap's binary
            timed(confined)
        plain = [timed(False) for _ in range(runs)]
        boxed = [timed(True) for _ in range(runs)]
    return {
        "runs": runs,
        "unconfined_median_ms": round(statistics.median(plain), 3),
        "confined_median_ms": round(statistics.median(boxed), 3),
        "overhead_median_ms": round(statistics.median(boxed) - statistics.median(plain), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a run of a few seconds (fewer runs)")
    parser.add_argument("--lanes", type=int, default=100)
    parser.add_argument("--scopes", type=int, default=500, help="owned scopes per lane, and as many locked")
    parser.add_argument("--runs", type=int, default=None, help="timed starts (default 10, 3 with --quick)")
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure")
    parser.add_argument("--before", type=Path, default=None, help="a checkout to measure too (the before figure)")
    parser.add_argument("--no-before", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary SQLite files go")
    parser.add_argument("--audit-files", type=int, default=10_000, help="tracked files of the audited worktree")
    parser.add_argument("--audit-changes", type=int, default=300, help="about how many changes it holds")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-warmup", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--confine-runs", type=int, default=None, help="confinement starts (default 50, 10 quick)")
    args = parser.parse_args()
    runs = args.runs if args.runs is not None else (3 if args.quick else 10)
    if args.child is not None:
        print(json.dumps(measure(args.child, args.lanes, args.scopes, runs, not args.no_warmup)))
        return
    before_root = args.before
    if before_root is None and not args.no_before and Path("/work/main/runner").is_dir():
        before_root = Path("/work/main")
    if before_root is not None and before_root.resolve() == args.root.resolve():
        before_root = None
    with tempfile.TemporaryDirectory(prefix="corral-bench-lanes-", dir=args.dir) as tmp:
        (Path(tmp) / "after").mkdir()
        after = _child(args.root, Path(tmp) / "after", args.lanes, args.scopes, runs, True)
        before = None
        if before_root is not None:
            (Path(tmp) / "before").mkdir()
            # The pre-index check takes seconds: with --quick one run, no warm-up.
            quick = args.quick
            before = _child(before_root, Path(tmp) / "before", args.lanes, args.scopes, 1 if quick else 3, not quick)
        (Path(tmp) / "audit").mkdir()
        audited = measure_audit(args.root, Path(tmp) / "audit", args.audit_files, args.audit_changes, max(runs, 5))
    worst = max(after["check_max_ms"], after["work_max_ms"])
    detail = (
        f"{args.lanes} live lanes x {args.scopes} owned + {args.scopes} locked scopes, a new lane as large, "
        f"{runs} runs: check median {after['check_median_ms']:.1f} ms (max {after['check_max_ms']:.1f}); "
        f"lock held up to COMMIT median {after['work_median_ms']:.1f} ms (max {after['work_max_ms']:.1f}), "
        f"with COMMIT's fsync median {after['hold_median_ms']:.1f} ms (max {after['hold_max_ms']:.1f})"
    )
    if before is not None:
        detail += (
            f"; before ({before_root}, {before['runs']} runs): check median {before['check_median_ms']:.1f} ms, "
            f"lock held up to COMMIT median {before['work_median_ms']:.1f} ms"
        )
    figure = {
        "figure": FIGURE,
        "value": round(worst, 2),
        "unit": "ms",
        "target": f"< {TARGET_MS:g} ms",
        "met": worst < TARGET_MS,
        "detail": detail,
    }
    audit_figure = {
        "figure": AUDIT_FIGURE,
        "value": audited["median_ms"],
        "unit": "ms",
        "target": f"< {AUDIT_TARGET_MS:g} ms",
        "met": audited["median_ms"] < AUDIT_TARGET_MS,
        "detail": (
            f"{audited['files']} tracked files, {audited['changes']} changes ({audited['violations']} outside the "
            f"owned scope), {audited['runs']} runs: median {audited['median_ms']:.1f} ms (max {audited['max_ms']:.1f})"
        ),
    }
    figures = [figure, audit_figure]
    boxed = measure_confinement(args.root, args.confine_runs or (10 if args.quick else 50))
    if boxed is not None and "skipped" not in boxed:
        figures.append(
            {
                "figure": CONFINE_FIGURE,
                "value": boxed["overhead_median_ms"],
                "unit": "ms",
                "target": f"< {CONFINE_TARGET_MS:g} ms",
                "met": boxed["overhead_median_ms"] < CONFINE_TARGET_MS,
                "detail": (
                    f"{boxed['runs']} runs of true: confined median {boxed['confined_median_ms']:.1f} ms, unconfined "
                    f"{boxed['unconfined_median_ms']:.1f} ms (ratio "
                    f"{boxed['confined_median_ms'] / max(boxed['unconfined_median_ms'], 0.001):.1f}x)"
                ),
            }
        )
    if args.json:
        print(json.dumps({"figures": figures, "after": after, "before": before, "confinement": boxed}, indent=2))
        return
    for shown in figures:
        met = "met" if shown["met"] else "MISSED"
        print(f"{shown['figure']}: {shown['value']} ms (target {shown['target']}: {met})")
        print(f"  {shown['detail']}")
    if boxed is not None and "skipped" in boxed:
        print(f"{CONFINE_FIGURE}: skipped ({boxed['skipped']})")


if __name__ == "__main__":
    main()

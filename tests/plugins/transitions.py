"""Transition coverage for the whole test session: every built-in machine's every transition must be exercised.

Loaded from ``tests/conftest.py`` (``pytest_plugins``). At session start it wraps, on the classes
themselves (so every instance in this process is seen, and everything is restored at the end):

* ``Engine.fire``: the events a firing committed (one, or the intent and outcome of a two-phase one);
* ``Engine._second_phase``: the intent event on entry, since it is committed even if the second phase
  then raises (a recheck refusal, a conflict);
* ``TransitionTable.fire``: which transition the engine chose (several may share a trigger, a source
  and a dest) and every guard that passed or refused, in the order the candidates were tried.

Only firings of a built-in machine's exact definition (same SHA-256) count. Firings in other processes
(the ``corral`` executable in CLI tests, multiprocessing races) are not seen: the check is about what
the suite exercises through the engine in-process.

At session end, when the whole suite ran, the recorded transition edges are compared with
:func:`runner.modelpaths.paths.list_targets` for every built-in machine; any edge never exercised fails the
session (exit status 1) with the list of missing edges. Guard refusals never exercised are reported
but never fail the session.

Under ``pytest-xdist`` (``-n``) every worker records what its tests exercised, and at its session end
hands that to the controller (``config.workeroutput``) with the test files it collected and the tests
it deselected; the controller merges them as each worker goes down (``pytest_testnodedown``) and
judges the merged record exactly as a run in one process is judged. A worker never judges.

"The whole suite ran" means all of:

* not ``--collect-only``; under xdist, at least one worker reported;
* no test was deselected (``-k``, ``-m``, ``--deselect``, ``--lf``, ``--sw`` all report deselections);
* every test file under ``testpaths`` matching ``python_files`` (as on disk when collection ended)
  started collecting: a file skipped at module level still counts; a subset of files or directories,
  or ``--ignore``, does not; nor does any ``path::test`` id among the arguments;
* the session was not stopped early (``-x``, ``--maxfail``, an interrupt) and ended in exit status 0
  or 1 (not a usage or internal error).

A skipped test exercises nothing: if one that would have covered an edge was skipped (``bwrap``
missing, say), the run fails and says how many tests were skipped; as the sandbox tests say of
``bwrap``, under CI that is a failure, not a skip.

``CORRAL_TRANSITION_COVERAGE`` selects the mode: ``enforce`` (the default) fails a whole-suite run on a
missing edge and says in one line why a partial run was not checked; ``report`` prints the full report
on every run and never fails; ``off`` records nothing.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runner.definitions.library import Library
from runner.definitions.model import MachineSpec, TransitionSpec
from runner.definitions.table import Firing, TransitionTable
from runner.engine.engine import Engine, Request, Result
from runner.modelpaths.paths import EdgeTarget, GuardTarget, Verdict, list_targets

ENV = "CORRAL_TRANSITION_COVERAGE"
MODES = ("enforce", "report", "off")
WORKER_OUTPUT = "corral_transition_coverage"  # the key of a worker's record in xdist's ``workeroutput``


@dataclass
class Recorder:
    """What the session exercised, per built-in machine; filled from any thread."""

    builtins: dict[str, MachineSpec]
    edges: dict[str, set[EdgeTarget]] = field(default_factory=dict)
    guards: dict[str, set[GuardTarget]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _local: threading.local = field(default_factory=threading.local)

    def counts(self, spec: MachineSpec) -> bool:
        builtin = self.builtins.get(spec.name)
        return builtin is not None and builtin.sha256 == spec.sha256

    def firing(self, table: TransitionTable, trigger: str, state: str, firing: Firing) -> None:
        """Guard verdicts of one evaluation: candidates are tried in order, each refused by one guard."""
        self._local.chosen = firing.chosen
        spec = table.spec
        if not self.counts(spec):
            return
        found: set[GuardTarget] = set()
        candidates = spec.transitions_for(trigger, state)
        for candidate, (guard, _) in zip(candidates, firing.rejections, strict=False):
            names = [g.name for g in candidate.guards]
            refused_at = names.index(guard) if guard in names else len(names)
            found |= _verdicts(candidate, refused_at)
        if firing.chosen is not None:
            found |= _verdicts(firing.chosen, None)
        with self._lock:
            self.guards.setdefault(spec.name, set()).update(found)

    def last_chosen(self) -> TransitionSpec | None:
        chosen: TransitionSpec | None = getattr(self._local, "chosen", None)
        return chosen

    def forget_chosen(self) -> None:
        self._local.chosen = None

    def event(self, spec: MachineSpec, chosen: TransitionSpec | None, trigger: str, source: str, dest: str) -> None:
        """One committed event of ``spec``, taken by transition ``chosen``."""
        if chosen is None or not self.counts(spec):
            return
        base, _, outcome = trigger.partition(":")
        edge = EdgeTarget(chosen.index, base, source, dest, outcome or None)
        with self._lock:
            self.edges.setdefault(spec.name, set()).add(edge)


def _verdicts(t: TransitionSpec, refused_at: int | None) -> set[GuardTarget]:
    """The guards of ``t`` that ran: all passing, or passing up to the one at ``refused_at``."""
    out = set()
    for position, ref in enumerate(t.guards):
        if refused_at is not None and position > refused_at:
            break
        verdict: Verdict = "refuse" if position == refused_at else "pass"
        out.add(GuardTarget(t.index, t.trigger, ref.name, position, verdict))
    return out


@dataclass
class Session:
    """The plugin's state for one pytest session."""

    mode: str
    recorder: Recorder | None = None
    restore: list[Callable[[], None]] = field(default_factory=list)
    modules: set[Path] = field(default_factory=set)
    files: set[Path] = field(default_factory=set)
    deselected: int = 0
    lines: list[tuple[str, dict[str, bool]]] = field(default_factory=list)
    workers: int = 0
    """Under xdist, on the controller: how many workers handed their record over."""


_KEY = pytest.StashKey[Session]()


def _mode() -> str:
    mode = os.environ.get(ENV, "enforce").strip().lower() or "enforce"
    if mode not in MODES:
        raise pytest.UsageError(f"{ENV}={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def _patch(owner: type, name: str, make: Callable[[Any], Any], restore: list[Callable[[], None]]) -> None:
    original = owner.__dict__[name]
    setattr(owner, name, make(original))
    restore.append(lambda: setattr(owner, name, original))


def _install(recorder: Recorder, restore: list[Callable[[], None]]) -> None:
    def table_fire(original: Any) -> Any:
        def fire(self: TransitionTable, trigger: str, state: str, ctx: Any) -> Firing:
            firing: Firing = original(self, trigger, state, ctx)
            recorder.firing(self, trigger, state, firing)
            return firing

        return fire

    def engine_fire(original: Any) -> Any:
        def fire(self: Engine, spec: MachineSpec, request: Request) -> Result:
            recorder.forget_chosen()
            result: Result = original(self, spec, request)
            chosen = recorder.last_chosen()
            for event in result.events:
                recorder.event(spec, chosen, event.trigger, event.from_state, event.to_state)
            return result

        return fire

    def second_phase(original: Any) -> Any:
        def phase(self: Engine, spec: MachineSpec, chosen: TransitionSpec, *args: Any, **kwargs: Any) -> Result:
            first = args[2] if len(args) > 2 else kwargs["first"]
            recorder.event(spec, chosen, first.trigger, first.from_state, first.to_state)
            result: Result = original(self, spec, chosen, *args, **kwargs)
            for event in result.events:
                recorder.event(spec, chosen, event.trigger, event.from_state, event.to_state)
            return result

        return phase

    _patch(TransitionTable, "fire", table_fire, restore)
    _patch(Engine, "fire", engine_fire, restore)
    _patch(Engine, "_second_phase", second_phase, restore)


def _builtins() -> dict[str, MachineSpec]:
    library = Library()
    return {path.stem: library.builtin(path.stem) for path in library.builtin_paths()}


# --- hooks ------------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KEY] = Session(_mode())


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _is_controller(config: pytest.Config) -> bool:
    """This process hands the tests to xdist workers (``-n N`` with N > 0) and runs none itself."""
    return config.pluginmanager.get_plugin("dsession") is not None


def pytest_sessionstart(session: pytest.Session) -> None:
    state = session.config.stash[_KEY]
    if state.mode == "off":
        return
    state.recorder = Recorder(_builtins())
    if not _is_controller(session.config):  # the controller runs no test: it only merges
        _install(state.recorder, state.restore)


def _worker_output(state: Session, recorder: Recorder) -> dict[str, Any]:
    """What a worker hands the controller: plain lists and tuples (execnet sends no dataclasses)."""
    return {
        "edges": {name: [astuple(e) for e in edges] for name, edges in recorder.edges.items()},
        "guards": {name: [astuple(g) for g in guards] for name, guards in recorder.guards.items()},
        "modules": [str(p) for p in state.modules],
        "files": [str(p) for p in state.files],
        "deselected": state.deselected,
    }


def _merge(state: Session, output: dict[str, Any]) -> None:
    """Add one worker's record to the controller's. Every worker collects the whole selection: the files
    on disk are those every worker saw (a file created while the suite ran is not missing)."""
    recorder = state.recorder
    assert recorder is not None
    for name, edges in output["edges"].items():
        recorder.edges.setdefault(name, set()).update(EdgeTarget(*e) for e in edges)
    for name, guards in output["guards"].items():
        recorder.guards.setdefault(name, set()).update(GuardTarget(*g) for g in guards)
    state.modules |= {Path(p) for p in output["modules"]}
    files = {Path(p) for p in output["files"]}
    state.files = files if state.workers == 0 else state.files & files
    state.deselected = max(state.deselected, int(output["deselected"]))
    state.workers += 1


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist, on the controller: a worker finished (its ``workeroutput`` holds its record) or died."""
    output = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
    state = node.config.stash[_KEY]
    if output is not None and state.recorder is not None:
        _merge(state, output)
        del node.workeroutput[WORKER_OUTPUT]  # a worker's record is merged once, however often it is reported


def pytest_collectstart(collector: pytest.Collector) -> None:
    if isinstance(collector, pytest.Module):
        collector.config.stash[_KEY].modules.add(collector.path.resolve())


def pytest_collection_finish(session: pytest.Session) -> None:
    # The files on disk when collection ended: a file added while the suite runs is not "missing".
    session.config.stash[_KEY].files = _test_files(session.config)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[_KEY].deselected += len(items)


def _test_files(config: pytest.Config) -> set[Path]:
    patterns = config.getini("python_files")
    roots = [config.rootpath / p for p in config.getini("testpaths")] or [config.rootpath]
    found = set()
    for root in roots:
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).parts
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            if any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns):
                found.add(path.resolve())
    return found


def partial_reason(session: pytest.Session, state: Session, exitstatus: int) -> str | None:
    """Why this session is not the whole suite, or None if it is."""
    config = session.config
    if config.option.collectonly:
        return "collect-only run"
    if _is_worker(config):
        return "xdist worker"
    if _is_controller(config) and state.workers == 0:
        return "no xdist worker reported"
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return f"exit status {int(exitstatus)}"
    if session.shouldstop or session.shouldfail:
        return f"stopped early ({session.shouldstop or session.shouldfail})"
    if state.deselected:
        return f"{state.deselected} test(s) deselected"
    chosen = [arg for arg in config.args if "::" in arg]
    if chosen:
        return f"test ids given ({chosen[0]}{', …' if len(chosen) > 1 else ''})"
    missing = sorted(state.files - state.modules)
    if missing:
        shown = ", ".join(str(p.relative_to(config.rootpath)) for p in missing[:3])
        return f"{len(missing)} test file(s) not collected ({shown}{', …' if len(missing) > 3 else ''})"
    return None


def _report(recorder: Recorder) -> tuple[list[str], list[str]]:
    """(missing transition edges, guard refusals never exercised), one line per machine."""
    edges: list[str] = []
    refusals: list[str] = []
    for name, spec in sorted(recorder.builtins.items()):
        targets = list_targets(spec)
        seen_edges = recorder.edges.get(name, set())
        seen_guards = recorder.guards.get(name, set())
        missing = [e for e in targets.transitions if e not in seen_edges]
        edges.extend(f"{name}: {e.id}" for e in missing)
        unrefused = [g for g in targets.guards if g.verdict == "refuse" and g not in seen_guards]
        if unrefused:
            total = sum(g.verdict == "refuse" for g in targets.guards)
            shown = ", ".join(f"t{g.transition} {g.trigger} {g.guard}" for g in unrefused)
            refusals.append(f"{name}: {len(unrefused)}/{total} never refused: {shown}")
    return edges, refusals


def _skipped(session: pytest.Session) -> int:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats: dict[str, list[Any]] = getattr(reporter, "stats", {})
    return len(stats.get("skipped", []))


def _restore(state: Session) -> None:
    while state.restore:
        state.restore.pop()()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash[_KEY]
    recorder = state.recorder
    _restore(state)
    if recorder is None:
        return
    if _is_worker(session.config):  # the controller judges the merged record
        session.config.workeroutput[WORKER_OUTPUT] = _worker_output(state, recorder)  # type: ignore[attr-defined]
        return
    reason = partial_reason(session, state, exitstatus)
    if reason is not None and state.mode == "enforce":
        state.lines.append((f"transition coverage not checked: {reason}", {}))
        return
    missing, refusals = _report(recorder)
    scope = "whole suite" if reason is None else f"partial run: {reason}"
    covered = sum(len(v) for v in recorder.edges.values())
    total = sum(len(list_targets(s).transitions) for s in recorder.builtins.values())
    state.lines.append((f"transition coverage ({scope}): {covered}/{total} transition edges exercised", {}))
    enforcing = state.mode == "enforce"
    if missing:
        verdict = "FAILED, never exercised" if enforcing else "never exercised (report only)"
        state.lines.append((f"{len(missing)} transition edge(s) {verdict}:", {"red": enforcing, "bold": True}))
        state.lines.extend((f"  {line}", {"red": enforcing}) for line in missing)
        if enforcing:
            skipped = _skipped(session)
            if skipped:
                state.lines.append(
                    (f"  {skipped} test(s) were skipped (a missing tool such as bwrap?): they may exercise these", {})
                )
            state.lines.append((f"  (set {ENV}=report to report without failing)", {}))
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if refusals:
        state.lines.append(("guard refusals never exercised (reported, never failing):", {"yellow": True}))
        state.lines.extend((f"  {line}", {}) for line in refusals)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash[_KEY]
    if not state.lines:
        return
    terminalreporter.section("transition coverage", sep="-")
    for line, markup in state.lines:
        terminalreporter.write_line(line, **markup)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_KEY, None)
    if state is not None:
        _restore(state)

"""Test-only fault points: pause or kill a process at a named moment, so tests can open race windows.

A fault point does nothing unless ``CORRAL_TEST_FAULTS=1`` is set; then ``CORRAL_FAULT=after:<point>``
kills the process right after that point (the crash-point harness), and ``CORRAL_FAULT_<NAME>`` (the
point's name upper-cased) says what to do there:

- ``kill``: ``SIGKILL`` this process (a crash exactly there);
- ``pause:PATH``: create ``PATH.reached``, then wait until ``PATH`` exists (at most 60 s), so a test
  can run something else inside the window and then let the process go on.

Points: ``<machine>.<trigger>:intent`` (a two-phase transition's intent committed, its effect not
started) and ``<machine>.<trigger>:effect`` (the effect done, its outcome not recorded), for every
two-phase transition of every machine (:mod:`runner.engine.engine`); ``credential_before_grant`` (a
grant's proposal saved, the grant not yet asked for),
``credential_after_grant`` (a grant committed, its credential not yet saved) and
``release_before_discard`` (a release committed, its credential file not yet removed);
``plan.step:<step id>:done`` (a plan step's operation returned, the step's outcome not yet recorded);
``agent.start:pane`` (inside a host's start: the pane exists, no lease records it yet) and,
on Herdr, ``agent.start:agent`` (its agent started, not yet observed). Agents never
inherit ``CORRAL_*`` variables, so an agent cannot arm them for its coordinator.
"""

from __future__ import annotations

import os


def point(name: str) -> None:
    """Honour the fault configured for ``name``, if tests armed one."""
    if os.environ.get("CORRAL_TEST_FAULTS") != "1":
        return
    action = (
        "kill" if os.environ.get("CORRAL_FAULT") == f"after:{name}" else os.environ.get(f"CORRAL_FAULT_{name.upper()}")
    )
    if not action:
        return
    if action == "kill":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    elif action.startswith("pause:"):
        import time

        gate = action.removeprefix("pause:")
        with open(f"{gate}.reached", "w", encoding="utf-8"):
            pass
        deadline = time.monotonic() + 60.0
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)

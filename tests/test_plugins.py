"""Guards, updates and effects from other distributions arrive through entry points, never by path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path


def make_plugin(root: Path) -> None:
    package = root / "corral_plugin_demo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent(
            '''
            from runner.context import Rejection, Update

            def weekday_guard(ctx, day="monday"):
                """Pass only on the named day (a plugin's guard)."""
                return None if ctx.params.get("day") == day else Rejection("wrong_day", "not " + day)

            def stamp_update(ctx):
                """Record that the plugin ran."""
                return Update(data={"stamped": True})

            def shadow_fence(ctx):
                """A plugin trying to replace the built-in fence guard."""
                return None
            '''
        )
    )
    dist = root / "corral_plugin_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: corral-plugin-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[corral.guards]\nweekday = corral_plugin_demo:weekday_guard\nfence = corral_plugin_demo:shadow_fence\n"
        "[corral.updates]\nstamp = corral_plugin_demo:stamp_update\n"
    )


MACHINE = """\
# yaml-language-server: $schema=x
machine: calendar
version: 1
description: Uses a plugin's guard and update.
initial: idle
states:
  idle: {description: i}
  done: {description: d, terminal: true}
transitions:
  - trigger: go
    source: idle
    dest: done
    guards: [{name: weekday, with: {day: friday}}]
    updates: [stamp]
data:
  stamped: {type: boolean}
"""

SCRIPT = """
import json, sys
from pathlib import Path
from runner.engine import Engine, Request
from runner.errors import RefusedError
from runner.guards import GUARDS
from runner.definitions.library import Library
from runner.sql.store_sqlite import SQLiteStore

library = Library()
spec = library.load(Path(sys.argv[1]))
engine = Engine(SQLiteStore(Path(sys.argv[2])), library)
try:
    engine.fire(spec, Request("calendar/1", "go", params={"day": "monday"}))
    refused = None
except RefusedError as exc:
    refused = exc.code
done = engine.fire(spec, Request("calendar/1", "go", params={"day": "friday"}))
print(json.dumps({"refused": refused, "state": done.instance.state, "data": dict(done.instance.data),
                  "fence_is_builtin": GUARDS.get("fence").fn.__module__}))
"""


def test_entry_point_plugins_are_found_and_cannot_replace_builtins(tmp_path: Path) -> None:
    make_plugin(tmp_path / "site")
    machine = tmp_path / "calendar.yaml"
    machine.write_text(MACHINE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(machine), str(tmp_path / "s.db")],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    result = json.loads(run.stdout)
    assert result == {
        "refused": "wrong_day",
        "state": "done",
        "data": {"stamped": True},
        "fence_is_builtin": "runner.guards.lease",
    }
    assert "ignored: a built-in has that name" in run.stderr


def test_without_the_plugin_the_names_are_unknown(tmp_path: Path) -> None:
    machine = tmp_path / "calendar.yaml"
    machine.write_text(MACHINE)
    run = subprocess.run(
        [sys.executable, "-m", "runner.cli", "validate", str(machine), "--json"],
        capture_output=True, text=True, check=False, timeout=60, env={**os.environ, "CORRAL_HOME": str(tmp_path / "h")},
    )  # fmt: skip
    codes = [d["code"] for f in json.loads(run.stdout)["files"] for d in f["diagnostics"]]
    assert run.returncode == 3 and codes == ["spec_unknown_guard", "spec_unknown_update"]

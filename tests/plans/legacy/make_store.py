"""Build ``store.sql``: a store written by corral before plan steps became parts (issue 13).

Run it with that older corral's code on the path (the main checkout before the change), e.g.::

    PYTHONPATH=/path/to/old/corral /path/to/old/corral/.venv/bin/python tests/plans/legacy/make_store.py

It leaves plan ``interrupted`` killed while step ``s1`` ran (``s0`` succeeded, ``s1`` running, its
runner gone) and plan ``broken`` failed at ``s1``, both with every step record in the plan's data, and
writes the database as SQL text (with its schema version) beside this script.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from runner.definitions.library import Library
from runner.definitions.recipes import RecipeLibrary
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import Service
from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
from runner.service.plans import Plans
from runner.sql.store_sqlite import SQLiteStore

HERE = Path(__file__).parent


class Killed(BaseException):
    """Stands for the runner's death: raised from its progress callback, nothing catches it."""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "corral.db"
        store = SQLiteStore(db)
        service = Service(store, Library(cache_dir=Path(tmp) / "cache"), actor="legacy")
        plans = Plans(service, RecipeLibrary([HERE / "recipes"]), MemoryKeeper(), OPERATIONS)
        plans.submit(PlanSubmitInput({"plan": "interrupted", "recipe": "legacy", "controller": "old"}))

        def die_in_s1(event: dict[str, Any]) -> None:
            if event["event"] == "step_started" and event["step"] == "s1":
                raise Killed

        with contextlib.suppress(Killed):
            anyio.run(plans.run, PlanRunInput("interrupted"), die_in_s1)
        plans.submit(PlanSubmitInput({"plan": "broken", "recipe": "legacyfail", "controller": "old"}))
        assert anyio.run(plans.run, PlanRunInput("broken")).state == "failed"
        store.close()
        conn = sqlite3.connect(db)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        application = conn.execute("PRAGMA application_id").fetchone()[0]
        lines = [f"PRAGMA user_version = {version};", f"PRAGMA application_id = {application};"]
        lines += [line for line in conn.iterdump() if line not in ("BEGIN TRANSACTION;", "COMMIT;")]
        conn.close()
    (HERE / "store.sql").write_text("\n".join(lines) + "\n")
    print(f"wrote {HERE / 'store.sql'} (schema version {version})", file=sys.stderr)


if __name__ == "__main__":
    main()

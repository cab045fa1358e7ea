"""Whether the dashboard stays responsive at scale: first render and filter time, in headless Chromium.

Issue 29's figures, measured in one run against a real ``corral serve`` of this checkout on loopback, in a
private state home (on ``/dev/shm`` when it exists, so that building the store is quick; ``--dir``
chooses another place):

- the store holds **a plan of 10,000 events** (``--events``: a recipe of that many ``flow.pass`` steps,
  run by ``corral run``; each step has a ``retry`` policy, so each step's record is one event, as
  an effectful step's is, where pure steps without one are committed 64 to an event) and **1,000 instances** beside it
  (``--instances`` live controller leases, acquired in one process);
- the page is opened at the plan's shared link (``/#plan=p-big``: its timeline and its 10,000 events in
  the event search) in Debian's Chromium through Playwright (``executable_path``, never a browser
  download; every request that is not for the server is refused, and the run fails if one was made);
- **first render**: the page's own stamp (``body[data-first-render]``: ``performance.now()`` when every
  data panel was drawn once, layout included: what needs a person, the 1,000 leases, the plans, the
  plan's timeline (its first 500 steps drawn); the event search loads right after, incrementally, and
  its stamp ``body[data-search-loaded]`` is in the detail; the machines' drawings come after and are in
  neither), the median over ``--loads`` fresh page loads. **Target: under 1,000 ms.**
- **filter**: typing a filter redraws every table and the event search from what the page holds (no
  request); the page stamps how long that took, layout included (``body[data-filter-ms]``). The
  median over ``--filters`` changes (alternately a text that matches one lease in a thousand and
  one that matches none, then cleared). **Target: under 100 ms.**

The page stays responsive because a table draws at most 500 rows (and keeps each row's element while
its data is unchanged) and the event search is a virtualized list (only the rows in view exist).

The same page over a store of 10 events and 1 instance is measured in the same run (``detail``:
``at_10_events_1_instance_ms``, and for the first render the ratio), since the machine's load moves the
absolute figures.

``--quick`` (for ``bench/summary.py``, about two minutes): 3 page loads, 10 filter changes; the scale is the
same. ``--json`` prints ``{"figures": [...]}`` (bench/README.md).

    python bench/dashboard.py [--quick] [--json] [--events N] [--instances N] [--loads N] [--filters N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common import print_figures  # noqa: E402 - bench/ runs as a script directory

FIRST_RENDER_TARGET_MS = 1000.0
FILTER_TARGET_MS = 100.0
FIRST_RENDER = "dashboard first render, a plan of 10,000 events and 1,000 instances (Chromium)"
FILTER = "dashboard filter, a plan of 10,000 events and 1,000 instances (Chromium)"

ACQUIRE = """
import sys
from runner.runtime import Config, Runtime
from runner.service import AcquireInput

home, count = sys.argv[1], int(sys.argv[2])
with Runtime.open(Config.load(home=home, actor="bench-dashboard")) as runtime:
    for i in range(count):
        runtime.service.controller.acquire(AcquireInput(f"ctl-{i:04d}", "BENCH", "0" * 64, 3600, "bench@host"))
"""


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(CORRAL_HOME=str(home), PYTHONPATH=str(ROOT), CORRAL_RECIPES=str(home.parent / "recipes"))
    return env


def build(home: Path, events: int, instances: int) -> dict[str, Any]:
    """The store: a plan of about ``events`` events (that many steps) and ``instances`` live leases."""
    recipes = home.parent / "recipes"
    recipes.mkdir(parents=True, exist_ok=True)
    # Each step declares a retry policy: a retried step is recorded per attempt (a pure step without
    # one is committed in batches of 64, which would leave the plan about events / 64 events).
    steps = "".join(f"  - {{id: s{i:05d}, do: flow.pass, retry: {{max_attempts: 1}}}}\n" for i in range(events))
    (recipes / "big.yaml").write_text(
        f"recipe: big\nversion: 1\ndescription: many steps\ninputs: {{type: object}}\nsteps:\n{steps}"
    )
    plan = home.parent / "plan.yaml"
    plan.write_text("plan: p-big\nrecipe: big\ncontroller: ctl-big\ninputs: {}\n")
    env = env_for(home)
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "runner.cli", "run", str(plan), "--json"],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(f"the plan did not run: {run.stderr[-2000:]}")
    plan_seconds = time.perf_counter() - started
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", ACQUIRE, str(home), str(instances)], env=env, check=True, timeout=900)
    return {"plan_seconds": round(plan_seconds, 1), "acquire_seconds": round(time.perf_counter() - started, 1)}


def serve(home: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "serve", "--listen", "127.0.0.1:0"],
        env=env_for(home), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"serving (http://\S+)", line)
        if found:
            return proc, found.group(1)
    raise SystemExit("corral serve did not start")


def measure(url: str, loads: int, filters: int, events: int, instances: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise SystemExit("needs chromium (apt-get install chromium) and playwright")
    refused: list[str] = []
    renders: list[float] = []
    searches: list[float] = []
    filtered: list[float] = []
    shown: dict[str, Any] = {}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            for load in range(loads):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.route(lambda u: not u.startswith(url + "/"), lambda r: (refused.append(r.request.url), r.abort()))
                page.goto(f"{url}/#plan=p-big", wait_until="load")
                page.wait_for_selector("body[data-first-render]", state="attached", timeout=120_000)
                renders.append(float(page.evaluate("document.body.dataset.firstRender")))
                page.wait_for_selector("body[data-search-loaded]", state="attached", timeout=120_000)
                searches.append(float(page.evaluate("document.body.dataset.searchLoaded")))
                if load == loads - 1:
                    shown = {
                        "leases_listed": int(page.locator("#controllers").get_attribute("data-matched") or 0),
                        "leases_drawn": page.locator("#controllers tr[data-key]").count(),
                        "events_held": int(page.locator("#search-list").get_attribute("data-rows") or 0),
                        "event_rows_drawn": int(page.locator("#search-list").get_attribute("data-drawn") or 0),
                        "timeline_steps": page.locator("#timeline [data-step]").count(),
                    }
                    for i in range(filters):
                        text = "ctl-0500" if i % 3 == 0 else ("no-such-thing" if i % 3 == 1 else "")
                        before = page.evaluate("document.body.dataset.filtered || '0'")
                        page.fill("#filter-q", text)
                        give_up = time.monotonic() + 30
                        # polled (the page's CSP refuses the eval wait_for_function runs in it)
                        while page.evaluate("document.body.dataset.filtered || '0'") == before:
                            if time.monotonic() > give_up:
                                raise SystemExit("a filter change was never drawn")
                            page.wait_for_timeout(5)
                        filtered.append(float(page.evaluate("document.body.dataset.filterMs")))
                page.close()
        finally:
            browser.close()
    if refused:
        raise SystemExit(f"the page asked for something not on the server: {refused[:5]}")
    if shown.get("leases_listed", 0) < instances or shown.get("events_held", 0) < events:
        raise SystemExit(f"the page did not show the whole store: {shown}")
    return {"renders_ms": renders, "searches_ms": searches, "filters_ms": filtered, "shown": shown}


def run_server(home: Path, work: Any) -> Any:
    proc, url = serve(home)
    try:
        return work(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 loads, 10 filter changes (under a minute)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--events", type=int, default=10_000, help="the plan's steps (one event each)")
    parser.add_argument("--instances", type=int, default=1000, help="live controller leases beside it")
    parser.add_argument("--loads", type=int, default=None, help="fresh page loads (default 7; quick 3)")
    parser.add_argument("--filters", type=int, default=None, help="filter changes (default 30; quick 10)")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary state home goes")
    args = parser.parse_args()
    loads = args.loads or (3 if args.quick else 7)
    filters = args.filters or (10 if args.quick else 30)
    base = args.dir or (Path("/dev/shm") if Path("/dev/shm").is_dir() else None)
    with tempfile.TemporaryDirectory(prefix="corral-bench-dashboard-", dir=base) as tmp:
        # The same page over a store of 10 events and 1 instance, in the same run: the ratio says what
        # the scale costs on a machine whose absolute figures move with its load.
        small_home = Path(tmp) / "small" / "home"
        small_home.mkdir(mode=0o700, parents=True)
        build(small_home, 10, 1)
        home = Path(tmp) / "big" / "home"
        home.mkdir(mode=0o700, parents=True)
        built = build(home, args.events, args.instances)
        small = run_server(small_home, lambda url: measure(url, loads, filters, 10, 1))
        found = run_server(home, lambda url: measure(url, loads, filters, args.events, args.instances))
    render = statistics.median(found["renders_ms"])
    filtering = statistics.median(found["filters_ms"])
    small_render = statistics.median(small["renders_ms"])
    small_filter = statistics.median(small["filters_ms"])
    detail = {"events": args.events, "instances": args.instances, **built, **found["shown"]}
    figures = [
        {
            "figure": FIRST_RENDER,
            "value": round(render, 1),
            "unit": "ms",
            "target": f"< {FIRST_RENDER_TARGET_MS:g} ms",
            "met": render < FIRST_RENDER_TARGET_MS,
            "detail": {
                **detail,
                "samples_ms": found["renders_ms"],
                "max_ms": max(found["renders_ms"]),
                "event_search_loaded_ms": found["searches_ms"],
                "at_10_events_1_instance_ms": small_render,
                "ratio_to_10_events_1_instance": round(render / max(small_render, 0.1), 2),
            },
        },
        {
            "figure": FILTER,
            "value": round(filtering, 1),
            "unit": "ms",
            "target": f"< {FILTER_TARGET_MS:g} ms",
            "met": filtering < FILTER_TARGET_MS,
            "detail": {
                **detail,
                "samples_ms": found["filters_ms"],
                "max_ms": max(found["filters_ms"]),
                "at_10_events_1_instance_ms": small_filter,
            },
        },
    ]
    print_figures(figures, args.json)


if __name__ == "__main__":
    main()

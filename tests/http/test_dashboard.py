"""The dashboard of ``corral serve`` in headless Chromium (Playwright driving Debian's ``chromium``).

A real ``corral serve`` on loopback in a scratch state home, the real ``corral`` CLI making transitions
in that home, and the page read as a user's browser reads it: every request that is not for this server
is aborted and recorded (none may be made), every console error and page error is kept (none may occur
on a clean load).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.http.recipes import GATE
from tests.support.browser import chromium
from tests.support.plans import steps_by_id
from tests.support.runs import stop_process

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SHA = hashlib.sha256(b"authority").hexdigest()
LIVE_TIMEOUT_MS = 20_000  # start-up of the page, the first refresh, a reconnect after a restart


@dataclass
class Served:
    """One ``corral serve`` subprocess and the environment of the CLI that shares its state home."""

    env: dict[str, str]
    args: list[str]
    proc: subprocess.Popen[str] | None = None
    url: str = ""

    def start(self, listen: str = "127.0.0.1:0") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", "serve", "--listen", listen, *self.args],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stderr is not None
        seen = []
        for line in self.proc.stderr:
            seen.append(line)
            found = re.search(r"serving (http://\S+)", line)
            if found:
                self.url = found.group(1)
                return
        self.stop()
        pytest.fail("corral serve did not start: " + "".join(seen))

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_process(self.proc, timeout=20)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None

    def corral(self, *args: str) -> Any:
        run = subprocess.run(
            [sys.executable, "-m", "runner.cli", *args, "--json"],
            env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        return json.loads(run.stdout) if run.stdout.strip() else None

    def acquire(self, controller: str) -> Any:
        return self.corral(
            "controller", "acquire", "--controller", controller, "--authority-ref", "T-1",
            "--authority-sha256", SHA, "--ttl", "600",
        )  # fmt: skip


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(CORRAL_HOME=str(home), PYTHONPATH=str(REPO))
    return env


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Served]:
    served = Served(_env(tmp_path / "home"), [])
    yield served
    served.stop()


@dataclass
class Tab:
    """A page of the dashboard and what it did: console errors, refused (non-local) requests, every URL."""

    page: Any
    errors: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    authorization: list[str] = field(default_factory=list)


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = chromium()
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()


def open_tab(browser: Any, url: str, width: int = 1400) -> Tab:
    """``url`` in a new tab at ``width`` CSS pixels; only requests to the server's own origin go through."""
    page = browser.new_page(viewport={"width": width, "height": 900}, device_scale_factor=1)
    tab = Tab(page)
    page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: tab.errors.append(f"page error: {e}"))

    def request(r: Any) -> None:
        tab.urls.append(r.url)
        if "authorization" in r.headers:
            tab.authorization.append(r.headers["authorization"])

    page.on("request", request)

    def refuse(route: Any) -> None:
        tab.refused.append(route.request.url)
        route.abort()

    page.route(lambda u: not u.startswith(url.rstrip("/") + "/"), refuse)
    page.goto(url + "/", wait_until="load")
    return tab


def wait_live(tab: Tab) -> None:
    """The stream is connected and the panels were refreshed at least once."""
    tab.page.wait_for_selector('#connection[data-state="live"]', timeout=LIVE_TIMEOUT_MS)
    # (selectors, not wait_for_function: the page's CSP refuses the eval that one runs in the page)
    tab.page.wait_for_selector("body[data-refreshed]", state="attached", timeout=LIVE_TIMEOUT_MS)


def test_page_loads_clean_shows_every_panel_and_fits_1400px(serve: Served, browser: Any, tmp_path: Path) -> None:
    serve.start()
    serve.acquire("ctl-a")
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    page = tab.page
    page.wait_for_selector('#controllers tr[data-key="ctl-a"]', timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('#events tr[data-instance="controller/ctl-a"]', timeout=LIVE_TIMEOUT_MS)
    # The controller's drawing highlights the instance the stream showed, in the state it is in.
    drawn = "svg" if shutil.which("dot") else "ol li.current"  # without Graphviz: the list of states
    page.wait_for_selector(
        f'figure[data-machine="controller"] .drawing[data-state="active"] {drawn}', timeout=LIVE_TIMEOUT_MS
    )
    assert page.locator("figure.machine").count() == len(serve.corral("machines")["machines"])
    countdown = page.locator('#controllers tr[data-key="ctl-a"] [data-expires]').inner_text()
    assert re.fullmatch(r"in \d+ s", countdown), countdown
    for panel in ("agents", "receipts", "writers"):
        assert page.locator(f"#{panel} td.empty").count() == 1  # an empty listing is said, not left blank
    assert page.locator("#decisions").inner_text() == "nothing waits on a person"
    assert page.locator("form.decide").count() == 0  # no token: no action
    assert page.locator("#gap").is_hidden()

    shot = tmp_path / "dashboard-1400.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 1400
    assert tab.errors == []
    assert tab.refused == []
    assert all(u.startswith(serve.url + "/") for u in tab.urls)


def test_a_transition_made_with_the_cli_appears_within_a_second(serve: Served, browser: Any) -> None:
    serve.start()
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    assert tab.page.locator('#controllers tr[data-key="ctl-b"]').count() == 0
    serve.acquire("ctl-b")
    # Polled for at most one second after the command returned (the bound, not a benchmark).
    tab.page.wait_for_selector('#events tr[data-instance="controller/ctl-b"][data-trigger="acquire"]', timeout=1000)
    tab.page.wait_for_selector('#controllers tr[data-key="ctl-b"]', timeout=1000)
    serve.corral("controller", "release", "--controller", "ctl-b", "--checkpoint-ref", "done",
                 "--checkpoint-sha256", SHA)  # fmt: skip
    tab.page.wait_for_selector('#events tr[data-instance="controller/ctl-b"][data-trigger="release"]', timeout=1000)
    # a released lease leaves the held leases
    tab.page.wait_for_selector('#controllers tr[data-key="ctl-b"]', state="detached", timeout=1000)
    assert tab.errors == []
    assert tab.refused == []


def test_a_pruned_log_shows_the_gap_on_reconnect_and_on_a_fresh_page(serve: Served, browser: Any) -> None:
    serve.start()
    serve.acquire("ctl-c")
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    tab.page.wait_for_selector('#events tr[data-instance="controller/ctl-c"]', timeout=LIVE_TIMEOUT_MS)
    cursor = tab.page.evaluate("document.body.dataset.lastEvent")
    port = serve.url.rsplit(":", 1)[1]
    # The server goes away; the log moves on and is pruned past the page's cursor; the server comes back.
    serve.stop()
    serve.acquire("ctl-d")
    serve.acquire("ctl-e")
    serve.corral("events", "prune", "--keep", "1")
    floor = serve.corral("status")["store"]["retention_floor"]
    assert int(cursor.rsplit(":", 1)[1]) < floor
    serve.start(f"127.0.0.1:{port}")
    # The page reconnects by itself from its old cursor (Last-Event-ID) and is told of the gap.
    banner = tab.page.locator("#gap")
    banner.wait_for(state="visible", timeout=LIVE_TIMEOUT_MS)
    assert banner.get_attribute("data-floor") == str(floor)
    assert banner.get_attribute("data-reason") == "pruned"
    assert f"#{floor}" in banner.inner_text()
    tab.page.wait_for_selector('#events tr[data-instance="controller/ctl-e"]', timeout=LIVE_TIMEOUT_MS)
    assert tab.page.locator('#events tr[data-instance="controller/ctl-d"]').count() == 0  # pruned: never shown
    assert tab.refused == []

    # A page opened now starts its stream below the floor (from the start): the gap shows at once.
    fresh = open_tab(browser, serve.url)
    wait_live(fresh)
    fresh.page.locator("#gap").wait_for(state="visible", timeout=LIVE_TIMEOUT_MS)
    assert fresh.page.locator("#gap").get_attribute("data-floor") == str(floor)
    fresh.page.click("#gap-dismiss")
    assert fresh.page.locator("#gap").is_hidden()
    assert fresh.errors == []
    assert fresh.refused == []


def test_with_a_server_token_the_page_asks_for_it_and_sends_it_only_in_a_header(
    serve: Served, browser: Any, tmp_path: Path
) -> None:
    secret = "dashboard-test-token-0123456789abcdef"
    token_file = tmp_path / "token"
    token_file.write_text(secret + "\n")
    token_file.chmod(0o600)
    serve.args = ["--auth-token-file", str(token_file)]
    serve.start()
    serve.acquire("ctl-t")
    tab = open_tab(browser, serve.url)
    page = tab.page
    page.locator("#auth-needed").wait_for(state="visible", timeout=LIVE_TIMEOUT_MS)
    assert page.locator('#controllers tr[data-key="ctl-t"]').count() == 0
    page.fill("#token-input", secret)
    page.click("#token-use")
    wait_live(tab)
    page.wait_for_selector('#controllers tr[data-key="ctl-t"]', timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('#events tr[data-instance="controller/ctl-t"]', timeout=LIVE_TIMEOUT_MS)
    page.locator("#auth-needed").wait_for(state="hidden", timeout=LIVE_TIMEOUT_MS)
    assert page.input_value("#token-input") == ""  # not left on screen
    assert page.evaluate("sessionStorage.getItem('corral.dashboard.token')") == secret
    assert f"Bearer {secret}" in tab.authorization
    assert not [u for u in tab.urls if secret in u]  # never in a URL
    assert tab.refused == []
    # Forgetting it: the next refresh is refused again and the page says so.
    page.click("#token-forget")
    page.locator("#auth-needed").wait_for(state="visible", timeout=LIVE_TIMEOUT_MS)
    assert page.evaluate("sessionStorage.getItem('corral.dashboard.token')") is None


def test_a_plan_is_drawn_as_a_step_waterfall(serve: Served, browser: Any, tmp_path: Path) -> None:
    serve.start()
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "plan: p-dash\nrecipe: validate\ncontroller: ctl-p\n"
        f"inputs: {{lane: no-such-lane, authority_ref: T-1, authority_sha256: {SHA}}}\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "runner.cli", "run", str(plan), "--json"],
        env=serve.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr  # acquire succeeds, verify finds no lane: failed
    page = tab.page
    page.wait_for_selector('#plans .plan[data-plan="p-dash"] [data-step="verify"]', timeout=LIVE_TIMEOUT_MS)
    shown = page.locator('#plans .plan[data-plan="p-dash"]')
    assert "failed" in shown.locator("h3").inner_text()
    # The runner's lease (issue 24): the plan failed, so its runner's lease ended.
    assert shown.locator("h3 .runner-expired").count() == 1
    assert "runner expired: pid" in shown.locator("h3").inner_text()
    assert [shown.locator("[data-step]").nth(i).inner_text() for i in range(2)] == ["acquire", "verify"]
    bars = shown.locator(".bar")
    assert bars.nth(0).get_attribute("class") == "bar step-succeeded"
    assert bars.nth(1).get_attribute("class") == "bar step-failed"
    left = [float(bars.nth(i).evaluate("b => parseFloat(b.style.left)")) for i in range(2)]
    assert left[0] < left[1]  # the verify step started after the acquire step
    assert tab.errors == []
    assert tab.refused == []


def test_without_graphviz_machines_are_listed_with_the_current_state(serve: Served, browser: Any) -> None:
    serve.env["PATH"] = str(Path(sys.executable).parent)  # no `dot` on the server's PATH
    assert shutil.which("dot", path=serve.env["PATH"]) is None
    serve.start()
    serve.acquire("ctl-g")
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    drawing = tab.page.locator('figure[data-machine="controller"] .drawing[data-state="active"][data-format="list"]')
    drawing.wait_for(timeout=LIVE_TIMEOUT_MS)
    assert drawing.locator("li.current").inner_text().startswith("active")
    assert drawing.locator("li.visited").inner_text().startswith("absent")
    assert drawing.locator("li").count() == 3  # absent, active, released
    assert tab.page.locator("figure.machine svg").count() == 0
    # The one failed request is the first SVG asked for; the page then asks only for DOT.
    svg_asks = [u for u in tab.urls if "format=svg" in u]
    assert len(svg_asks) == 1, svg_asks
    assert tab.refused == []


def test_a_pending_decision_is_decided_from_the_page_only_with_a_token(
    serve: Served, browser: Any, tmp_path: Path
) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "gate.yaml").write_text(GATE)
    serve.env["CORRAL_RECIPES"] = str(recipes)
    plan = tmp_path / "plan.yaml"
    plan.write_text("plan: p-gate\nrecipe: gate\ncontroller: ctl-gate\ninputs: {}\n")
    run = subprocess.run(
        [sys.executable, "-m", "runner.cli", "run", str(plan), "--json"],
        env=serve.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 5, run.stdout + run.stderr  # paused: a person decides
    decision = '#decisions .decision[data-decision="plan:p-gate:approve"]'

    serve.start()  # no token: the decision is shown, the action is not
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    tab.page.wait_for_selector(decision, timeout=LIVE_TIMEOUT_MS)
    assert "Ship release 1.2?" in tab.page.locator(decision).inner_text()
    assert tab.page.locator(f"{decision} form.decide").count() == 0
    assert tab.errors == []
    tab.page.close()
    serve.stop()

    secret = "decide-from-the-page-0123456789"
    (tmp_path / "token").write_text(secret + "\n")
    (tmp_path / "token").chmod(0o600)
    serve.args = ["--auth-token-file", str(tmp_path / "token")]
    serve.start()
    tab = open_tab(browser, serve.url)
    page = tab.page
    page.fill("#token-input", secret)
    page.click("#token-use")
    page.wait_for_selector(f"{decision} form.decide", timeout=LIVE_TIMEOUT_MS)
    page.click(f"{decision} button[value=approve]")  # no reason yet: refused on the page, nothing sent
    page.wait_for_selector("#problem:text-matches('needs a reason')", timeout=LIVE_TIMEOUT_MS)
    page.fill(f"{decision} input[type=text]", "release notes reviewed")
    # Something happens meanwhile (any event brings a refresh): the reason being typed is kept.
    refreshed = page.evaluate("document.body.dataset.refreshed")
    serve.acquire("ctl-bystander")
    page.wait_for_selector("#controllers td:has-text('ctl-bystander')", timeout=LIVE_TIMEOUT_MS)
    give_up = time.monotonic() + LIVE_TIMEOUT_MS / 1000  # that refresh's every panel, decisions too, is done
    while page.evaluate("document.body.dataset.refreshed") == refreshed:
        assert time.monotonic() < give_up, "the refresh never ended"
        page.wait_for_timeout(50)
    assert page.input_value(f"{decision} input[type=text]") == "release notes reviewed"
    # ...and so is what the page said about the refused click: a refresh clears only its own failures.
    assert "needs a reason" in page.locator("#problem").inner_text()
    page.click(f"{decision} button[value=approve]")
    # The server records the decision and resumes the plan: it runs to its end and nothing waits any more.
    page.wait_for_selector(decision, state="detached", timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('#events tr[data-instance="plan/p-gate"][data-trigger="decide"]', timeout=LIVE_TIMEOUT_MS)
    shown = json.loads(
        subprocess.run(
            [sys.executable, "-m", "runner.cli", "plans", "show", "p-gate", "--json"],
            env=serve.env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout
    )  # fmt: skip
    record = steps_by_id(shown)["approve"]
    assert record["state"] == "succeeded"
    assert record["decision"]["reason"] == "release notes reviewed"
    assert f"Bearer {secret}" in tab.authorization
    assert not [u for u in tab.urls if secret in u]
    assert tab.refused == []


BROKEN_WORDS = """(row) => {
  const broken = [];
  for (const td of document.querySelectorAll(row + " td")) {
    if (td.classList.contains("ident")) continue;
    const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      for (const word of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(word[0]);
      }
    }
  }
  return broken;
}"""
"""The words of a table row's cells (identifiers aside) that the browser broke across lines."""


def test_the_agents_view_shows_live_progress_session_and_spend_against_budget(
    serve: Served, browser: Any, tmp_path: Path
) -> None:
    from tests.support import stream_agent

    home = Path(serve.env["CORRAL_HOME"])
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "agents.yaml").write_text(stream_agent.kind_yaml())
    project = tmp_path / "project"
    project.mkdir()
    go = project / "go"  # where the confined reviewer reads: its own directory
    serve.start()
    serve.acquire("ctl")
    lease = serve.corral(
        "reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "streamer", "--cwd", str(project),
        "--budget-usd", "1", "--budget-tokens", "1000", "--max-turns", "5",
    )["lease"]  # fmt: skip
    pane = lease["pane_id"]
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    page = tab.page
    relay = subprocess.run(
        [sys.executable, "-m", "runner.cli", "relay", "rev", "--controller", "ctl", "--json"],
        input=f"read lib.py\nwrite /tmp/out.txt\nwait {go}\nreviewed", env=serve.env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    token = json.loads(relay.stdout)["receipt"]["token"]
    cell = f'#agents tr[data-key="{pane}"] td.activity'
    page.wait_for_selector(f'{cell}[data-running="true"] >> text="file /tmp/out.txt"', timeout=LIVE_TIMEOUT_MS)
    assert page.locator(f"{cell} .line").all_inner_texts() == [
        "tool Read lib.py",
        "tool Write /tmp/out.txt",
        "file /tmp/out.txt",
    ]
    go.write_text("")
    page.wait_for_selector(f'{cell}[data-running="false"]', timeout=LIVE_TIMEOUT_MS)
    serve.corral("collect", "--receipt", token, "--controller", "ctl")
    row = f'#agents tr[data-key="{pane}"]'
    page.wait_for_selector(
        f'{row} td.spend >> text="120 tok / 1000 · $0.25 / $1 · 1 turn / 5"', timeout=LIVE_TIMEOUT_MS
    )
    session = page.locator(f"{row} td.session").inner_text()
    assert session == serve.corral("status")["spend"][0]["session_id"]
    # At 1400 px a long lease id gives way: no word of another cell is broken across lines.
    assert page.locator(f"{row} td.ident").inner_text().startswith("reviewer/")
    assert page.evaluate(BROKEN_WORDS, row) == []
    assert stream_agent.SECRET not in page.content()
    assert tab.errors == []
    assert tab.refused == []

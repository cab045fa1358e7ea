"""The dashboard's views in headless Chromium: what needs a person, filters in the URL, a plan's timeline,
an agent's detail; each rendered from a real ``corral serve`` with state the test made through the CLI.

With ``CORRAL_UPDATE_SCREENSHOTS=1`` each test also writes its view's screenshot to ``docs/images/``
(the pictures of ``docs/dashboard.md``).
"""

# ruff: noqa: F811
# (the fixtures browser and serve are imported from test_dashboard: each test's parameter of that name
# is the fixture, which F811 takes for a redefinition)

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.http.recipes import FLAKY, GATE
from tests.http.test_dashboard import (  # noqa: F401  (the fixtures: browser, serve)
    LIVE_TIMEOUT_MS,
    REPO,
    Served,
    Tab,
    browser,
    open_tab,
    serve,
    wait_live,
)

pytestmark = pytest.mark.slow


def shoot(tab: Tab, name: str, selector: str | None = None) -> None:
    """The view's screenshot for docs/dashboard.md, when asked (CORRAL_UPDATE_SCREENSHOTS=1)."""
    if os.environ.get("CORRAL_UPDATE_SCREENSHOTS") != "1":
        return
    images = REPO / "docs" / "images"
    images.mkdir(parents=True, exist_ok=True)
    path = str(images / f"dashboard-{name}.png")
    if selector is None:  # the top of the page, as a reader first sees it
        tab.page.screenshot(path=path)
    else:
        tab.page.locator(selector).screenshot(path=path)


def run_plans(serve: Served, tmp_path: Path, *plans: tuple[str, str, str, int]) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir(exist_ok=True)
    serve.env["CORRAL_RECIPES"] = str(recipes)
    for plan_id, recipe, text, status in plans:
        (recipes / f"{recipe}.yaml").write_text(text)
        plan = tmp_path / f"{plan_id}.yaml"
        plan.write_text(f"plan: {plan_id}\nrecipe: {recipe}\ncontroller: ctl-{plan_id}\ninputs: {{}}\n")
        run = subprocess.run(
            [sys.executable, "-m", "runner.cli", "run", str(plan), "--json"],
            env=serve.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert run.returncode == status, run.stdout + run.stderr


def hash_state(tab: Tab) -> dict[str, list[str]]:
    return parse_qs(str(tab.page.evaluate("location.hash")).lstrip("#"))


def test_what_needs_a_person_comes_first_with_the_command_that_settles_it(
    serve: Served, browser: Any, tmp_path: Path
) -> None:
    run_plans(serve, tmp_path, ("p-gate", "gate", GATE, 5))  # paused: it waits on a person's approval
    serve.start()
    serve.acquire("ctl-bystander")
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    page = tab.page
    item = page.locator('#decisions .decision[data-decision="plan:p-gate:approve"]')
    item.wait_for(timeout=LIVE_TIMEOUT_MS)
    assert item.get_attribute("data-kind") == "decision"
    assert "Ship release 1.2?" in item.inner_text()
    command = item.locator("code.command").inner_text()
    assert command.startswith("corral plans decide p-gate --step approve")
    assert page.locator("#attention-count").inner_text() == "(1)"
    # First on the page: above every other panel.
    first = page.locator("main > section:not([hidden])").first
    assert first.get_attribute("id") == "panel-attention"
    assert item.locator("form.decide").count() == 0  # no token: the command, never a button
    page.click("#decisions button.copy")
    # The button says what happened once the clipboard's promise settles (copied, or selected without
    # one); a selector, not wait_for_function (the page's CSP refuses the eval that one runs in the page).
    page.wait_for_selector("#decisions button.copy:text-matches('^(copied|selected)$')", timeout=LIVE_TIMEOUT_MS)
    shoot(tab, "attention", "#panel-attention")
    assert tab.errors == []
    assert tab.refused == []


def test_a_filter_goes_into_the_url_and_a_shared_url_restores_it(serve: Served, browser: Any) -> None:
    serve.start()
    for name in ("alpha-1", "alpha-2", "beta-1"):
        serve.acquire(name)
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    page = tab.page
    page.wait_for_selector('#controllers tr[data-key="beta-1"]', timeout=LIVE_TIMEOUT_MS)
    before = page.evaluate("document.body.dataset.filtered || '0'")
    page.fill("#filter-controller", "alpha")
    page.wait_for_selector('#controllers tr[data-key="beta-1"]', state="detached", timeout=LIVE_TIMEOUT_MS)
    assert page.evaluate("document.body.dataset.filtered") != before
    assert page.locator("#controllers tr[data-key]").count() == 2
    assert page.locator("#controllers").get_attribute("data-matched") == "2"
    assert hash_state(tab) == {"controller": ["alpha"]}
    # The event search follows the same filter: only the alpha controllers' events.
    page.wait_for_selector("#search-list .vrow", timeout=LIVE_TIMEOUT_MS)
    shown = page.locator("#search-list .vrow").evaluate_all("rows => rows.map(r => r.dataset.instance)")
    assert shown and set(shown) == {"controller/alpha-1", "controller/alpha-2"}
    page.fill("#filter-state", "active")
    assert hash_state(tab) == {"controller": ["alpha"], "state": ["active"]}
    shared = str(page.evaluate("location.href"))
    assert float(page.evaluate("document.body.dataset.filterMs")) >= 0

    # The link, opened in another tab, restores the filters and what they show.
    other = open_tab(browser, shared.split("#", maxsplit=1)[0].rstrip("/"))
    other.page.goto(shared)
    wait_live(other)
    other.page.wait_for_selector('#controllers tr[data-key="alpha-1"]', timeout=LIVE_TIMEOUT_MS)
    assert other.page.input_value("#filter-controller") == "alpha"
    assert other.page.input_value("#filter-state") == "active"
    assert other.page.locator("#controllers tr[data-key]").count() == 2
    shoot(other, "filters")
    # Clearing them empties the hash and shows everything again.
    other.page.click("#filters-clear")
    other.page.wait_for_selector('#controllers tr[data-key="beta-1"]', timeout=LIVE_TIMEOUT_MS)
    assert hash_state(other) == {}
    for t in (tab, other):
        assert t.errors == []
        assert t.refused == []


def test_a_plan_timeline_shows_each_attempt_and_a_link_to_it_restores_it(
    serve: Served, browser: Any, tmp_path: Path
) -> None:
    run_plans(serve, tmp_path, ("p-flaky", "flaky", FLAKY, 1), ("p-gate", "gate", GATE, 5))
    serve.start()
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    page = tab.page
    page.click('#plan-list a.plan-link:text-is("p-flaky")')
    assert hash_state(tab) == {"plan": ["p-flaky"]}
    panel = page.locator("#panel-timeline")
    panel.wait_for(state="visible", timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('#timeline .plan-timeline[data-plan="p-flaky"] [data-step="flaky"]', timeout=LIVE_TIMEOUT_MS)
    steps = page.locator("#timeline [data-step]").all_inner_texts()
    assert steps == ["before", "flaky"]
    bars = page.locator("#timeline .track").nth(1).locator(".bar")
    assert [bars.nth(i).get_attribute("data-attempt") for i in range(bars.count())] == ["1", "2", "3"]
    assert bars.nth(0).get_attribute("class") == "bar step-retried"
    assert bars.nth(2).get_attribute("class") == "bar step-failed"
    left = [float(bars.nth(i).evaluate("b => parseFloat(b.style.left)")) for i in range(3)]
    assert left == sorted(left) and left[0] < left[2]
    facts = page.locator('#timeline [data-facts="flaky"]').inner_text()
    assert "2 retries" in facts and "error flaky" in facts
    assert facts.endswith("—") or "— ·" in facts  # no agent ran: its spend is unknown, shown as a dash
    # The event search holds that plan's events only.
    page.wait_for_selector("#search-count:has-text('of plan p-flaky')", timeout=LIVE_TIMEOUT_MS)
    instances = page.locator("#search-list .vrow").evaluate_all("rows => rows.map(r => r.dataset.instance)")
    assert instances and set(instances) == {"plan/p-flaky"}
    shoot(tab, "timeline", "#panel-timeline")

    # A link to the other plan's timeline, opened fresh: the approval's wait is drawn, not yet decided.
    fresh = open_tab(browser, serve.url)
    fresh.page.goto(f"{serve.url}/#plan=p-gate")
    wait_live(fresh)
    fresh.page.wait_for_selector('#timeline .plan-timeline[data-plan="p-gate"] .wait', timeout=LIVE_TIMEOUT_MS)
    assert "waits on approval" in fresh.page.locator('#timeline [data-facts="approve"]').inner_text()
    fresh.page.click("#timeline-close")
    fresh.page.locator("#panel-timeline").wait_for(state="hidden", timeout=LIVE_TIMEOUT_MS)
    assert hash_state(fresh) == {}
    for t in (tab, fresh):
        assert t.errors == []
        assert t.refused == []


def test_the_agent_detail_shows_its_lease_conversation_live_progress_and_receipts(
    serve: Served, browser: Any, tmp_path: Path
) -> None:
    from tests.support import stream_agent

    home = Path(serve.env["CORRAL_HOME"])
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "agents.yaml").write_text(stream_agent.kind_yaml())
    project = tmp_path / "project"
    project.mkdir()
    go = project / "go"
    serve.start()
    serve.acquire("ctl")
    lease = serve.corral(
        "reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "streamer", "--cwd", str(project),
        "--budget-tokens", "1000",
    )["lease"]  # fmt: skip
    pane = lease["pane_id"]
    tab = open_tab(browser, serve.url)
    wait_live(tab)
    page = tab.page
    page.click(f'#agents tr[data-key="{pane}"] a.agent-link')
    assert hash_state(tab) == {"pane": [pane]}
    page.locator("#panel-agent").wait_for(state="visible", timeout=LIVE_TIMEOUT_MS)
    relay = subprocess.run(
        [sys.executable, "-m", "runner.cli", "relay", "rev", "--controller", "ctl", "--json"],
        input=f"read lib.py\nwrite /tmp/out.txt\nwait {go}\nreviewed", env=serve.env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    receipt = json.loads(relay.stdout)["receipt"]["token"]
    detail = f'#agent .agent-detail[data-pane="{pane}"]'
    page.wait_for_selector(
        f'{detail} .progress[data-running="true"] li:text-is("file /tmp/out.txt")', timeout=LIVE_TIMEOUT_MS
    )
    assert page.locator(f"{detail} .progress-lines li").all_inner_texts() == [
        "tool Read lib.py",
        "tool Write /tmp/out.txt",
        "file /tmp/out.txt",
    ]
    page.wait_for_selector(f'{detail} .agent-receipts tr[data-key="{receipt}"]', timeout=LIVE_TIMEOUT_MS)
    go.write_text("")
    page.wait_for_selector(f'{detail} .progress[data-running="false"]', timeout=LIVE_TIMEOUT_MS)
    serve.corral("collect", "--receipt", receipt, "--controller", "ctl")
    row = f'{detail} .agent-receipts tr[data-key="{receipt}"]'
    page.wait_for_selector(f"{row} td:text-is('completed')", timeout=LIVE_TIMEOUT_MS)
    assert page.locator(f"{row} td").nth(3).inner_text() == "120 tok · $0.25"
    session = serve.corral("status")["spend"][0]["session_id"]
    page.wait_for_selector(f'{detail} dd[data-fact="conversation id"]:text-is("{session}")', timeout=LIVE_TIMEOUT_MS)
    assert page.locator(f'{detail} dd[data-fact="lease"]').inner_text().startswith(lease["id"])
    assert stream_agent.SECRET not in page.content()
    shoot(tab, "agent", "#panel-agent")
    assert tab.errors == []
    assert tab.refused == []


def test_no_token_reaches_the_url_when_the_page_filters_and_selects(
    serve: Served, browser: Any, tmp_path: Path
) -> None:
    secret = "filters-never-carry-this-token-0123"
    (tmp_path / "token").write_text(secret + "\n")
    (tmp_path / "token").chmod(0o600)
    serve.args = ["--auth-token-file", str(tmp_path / "token")]
    serve.start()
    serve.acquire("ctl-x")
    tab = open_tab(browser, serve.url)
    page = tab.page
    page.fill("#token-input", secret)
    page.click("#token-use")
    wait_live(tab)
    page.wait_for_selector('#controllers tr[data-key="ctl-x"]', timeout=LIVE_TIMEOUT_MS)
    page.fill("#filter-q", "ctl")
    page.wait_for_selector("#search-list .vrow", timeout=LIVE_TIMEOUT_MS)
    assert secret not in str(page.evaluate("location.href"))
    assert not [u for u in tab.urls if secret in u]
    assert f"Bearer {secret}" in tab.authorization
    assert tab.refused == []  # (its console holds the 401s of the loads before the token was pasted)

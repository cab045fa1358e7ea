"""Lay a local page out in headless Chromium (Playwright, Debian's chromium) and measure what a reader sees.

Used for the review pack and a drawn machine: at a given viewport width, does anything overflow
horizontally, and how tall is each state label as rendered? No network: every request that is not for
a ``file:`` URL is aborted and recorded, and the caller asserts that none was made.

Playwright drives the system's ``chromium`` (``executable_path``); its own browser download
(``playwright install``) is never used, so it works offline and in CI, which installs chromium.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Every element whose box sticks out of the viewport, and every state label's rendered box.
_MEASURE = """
() => {
  const root = document.scrollingElement || document.documentElement;
  const width = root.clientWidth;
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (el.getAttribute('class') ? '.' + el.getAttribute('class').split(/\\s+/).join('.') : '');
  const wide = [];
  for (const el of document.querySelectorAll('body *, svg *')) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    if (box.width > width + 0.5 || box.right > width + 0.5 || box.left < -0.5) {
      wide.push([name(el), Math.round(box.left), Math.round(box.right), (el.textContent || '').slice(0, 60)]);
    }
  }
  // Inside the page's margin: nothing reaches past the body's content box (its padding is the margin).
  const margin = [];
  if (document.body) {
    const style = getComputedStyle(document.body), body = document.body.getBoundingClientRect();
    const left = body.left + parseFloat(style.paddingLeft), right = body.right - parseFloat(style.paddingRight);
    for (const el of document.body.querySelectorAll('*')) {
      const box = el.getBoundingClientRect();
      if (box.width === 0 && box.height === 0) continue;
      if (box.right > right + 0.5 || box.left < left - 0.5) {
        margin.push([name(el), Math.round(box.left), Math.round(box.right), (el.textContent || '').slice(0, 60)]);
      }
    }
  }
  const labels = [];
  for (const svg of document.querySelectorAll('svg')) {
    const article = svg.closest('article');
    const drawing = article ? article.getAttribute('data-name') : (document.title || 'svg');
    const kind = article ? article.className : 'machine';
    for (const node of svg.querySelectorAll('g.node')) {
      for (const text of node.querySelectorAll('text')) {
        if (!text.textContent.trim()) continue;
        const box = text.getBoundingClientRect();
        labels.push([kind, drawing, text.textContent, box.height, text.getBBox().height]);
      }
    }
  }
  // The table of contents (the review pack's): each entry's text, depth and rendered position.
  const contents = [...document.querySelectorAll('nav#contents a')].map(a => {
    const box = a.getBoundingClientRect();
    let depth = 0;
    for (let el = a.parentElement; el && el.id !== 'contents'; el = el.parentElement) if (el.tagName === 'OL') depth++;
    return [a.textContent, depth, Math.round(box.left), Math.round(box.top)];
  });
  return {scrollWidth: root.scrollWidth, clientWidth: width, wide, margin, labels, contents};
}
"""


@dataclass
class Layout:
    """What a page looked like: its scroll and client widths, what stuck out, every node label's height."""

    scroll_width: int
    client_width: int
    wide: list[list[Any]]  # [element, left, right, text] of each element outside the viewport
    margin: list[list[Any]]  # the same, of each element reaching into the body's padding (its margin)
    labels: list[list[Any]]  # [article class, drawing, text, rendered height px, own bbox height]
    requested: list[str] = field(default_factory=list)  # every non-file URL the page asked for (all refused)
    contents: list[list[Any]] = field(default_factory=list)  # [text, depth (1: top), left, top] per contents link


def chromium() -> str:
    """The system Chromium, or skip (fail in CI, which must have it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    try:
        import playwright.sync_api  # noqa: F401  (only checking it is installed)
    except ImportError:
        found = None
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must provide chromium and playwright (.ci/run and the test extra install them)")
        pytest.skip("needs chromium and playwright (apt-get install chromium; pip install -e '.[test]')")
    return found


def lay_out(page: Path, width: int = 1400, height: int = 900) -> Layout:
    """Open ``page`` (a local file) at ``width`` CSS pixels, wait for it to load, and measure it."""
    from playwright.sync_api import Route, sync_playwright

    executable = chromium()
    requested: list[str] = []

    def refuse(route: Route) -> None:
        requested.append(route.request.url)
        route.abort()

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            tab = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
            tab.route(lambda url: not url.startswith("file:"), refuse)
            tab.goto(page.as_uri(), wait_until="load")
            found: dict[str, Any] = tab.evaluate(_MEASURE)
        finally:
            browser.close()
    return Layout(
        found["scrollWidth"],
        found["clientWidth"],
        found["wide"],
        found["margin"],
        found["labels"],
        requested,
        found["contents"],
    )

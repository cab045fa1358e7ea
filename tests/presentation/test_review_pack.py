"""The review pack: one self-contained HTML page, every machine and recipe drawn, opened offline in Chromium."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from runner._version import __version__
from runner.cli.app import main
from runner.data import data_dir
from runner.definitions.library import Library
from runner.definitions.recipes import RecipeLibrary
from runner.guards import GUARDS
from runner.presentation.pack import FILENAME, write
from runner.updates import UPDATES

# Without Graphviz only the error test can run; CI must have it (the pack tests then fail instead of skipping).
needs_graphviz = pytest.mark.skipif(
    shutil.which("dot") is None and not os.environ.get("CI"), reason="the review pack needs Graphviz (CI has it)"
)

BUILTIN_MACHINES = sorted(p.stem for p in data_dir("machines").glob("*.yaml"))
BUILTIN_RECIPES = sorted(p.stem for p in data_dir("recipes").glob("*.yaml"))
LOCAL_MACHINE = """\
machine: turnstile
version: 2
description: A local machine, to show the pack covers local ones too.
initial: locked
states:
  locked: {description: Waiting for a coin.}
  open: {description: One may pass.}
  broken: {description: Out of order., terminal: true}
transitions:
  - {trigger: coin, source: locked, dest: open}
  - {trigger: push, source: open, dest: locked}
  - {trigger: smash, source: "*", dest: broken}
"""
LOCAL_RECIPE = """\
recipe: local-review
version: 3
description: A local recipe extending a built-in one.
extends: review
insert_after:
  relay:
    - id: note
      do: flow.pass
      with: {values: {seen: true}}
"""
# Resource references that would make the page fetch something: none may point off the page.
RESOURCE = re.compile(r"""\b(?:src|href|xlink:href|action|poster|data)\s*=\s*["']?\s*(?!#)[^"'\s>]+""", re.IGNORECASE)


class _Outline(HTMLParser):
    """Articles (class, id, data-name), whether each holds an <svg>, every tag name, every href."""

    def __init__(self) -> None:
        super().__init__()
        self.articles: list[dict[str, Any]] = []
        self.tags: set[str] = set()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.add(tag)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if "href" in found:
            self.hrefs.append(str(found["href"]))
        if tag == "article":
            self.articles.append({"class": found.get("class"), "id": found.get("id"), "name": found.get("data-name")})
            self.articles[-1]["svg"] = 0
        if tag == "svg" and self.articles:
            self.articles[-1]["svg"] += 1


def _outline(text: str) -> _Outline:
    parser = _Outline()
    parser.feed(text)
    return parser


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The pack, written once for the module (a Graphviz drawing per machine and recipe: seconds); the
    tests only read it (the browser tests add their probe page beside it)."""
    tmp_path = tmp_path_factory.mktemp("review-pack")
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "turnstile.yaml").write_text(LOCAL_MACHINE)
    (machines / "broken.yaml").write_text("machine: broken\nversion: 1\n")
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "local-review.yaml").write_text(LOCAL_RECIPE)
    library = Library(cache_dir=tmp_path / "cache", local_dirs=[machines])
    written = write(tmp_path / "pack", library, RecipeLibrary([recipes]))
    return written.path, written


@needs_graphviz
def test_pack_covers_every_machine_and_recipe(pack: tuple[Path, Any]) -> None:
    path, written = pack
    assert path.name == FILENAME and path.is_file()
    assert written.machines == [*BUILTIN_MACHINES, "turnstile"]
    assert sorted(written.recipes) == sorted([*BUILTIN_RECIPES, "local-review"])
    assert written.invalid == ["machine broken"]
    text = path.read_text(encoding="utf-8")
    outline = _outline(text)
    drawn = {(a["class"], a["name"]): a for a in outline.articles}
    for name in written.machines:
        assert drawn[("machine", name)]["svg"] == 1, name
    for name in written.recipes:
        assert drawn[("recipe", name)]["svg"] == 1, name
    assert drawn[("machine invalid", "broken")]["svg"] == 0
    for article in outline.articles:  # the table of contents links to every section
        assert f"#{article['id']}" in outline.hrefs
    assert {h[1:] for h in outline.hrefs} <= outline.ids, "a contents link goes nowhere"


@needs_graphviz
def test_pack_tables_and_versions(pack: tuple[Path, Any]) -> None:
    path, _ = pack
    text = path.read_text(encoding="utf-8")
    assert f"corral <strong>{__version__}</strong>" in text
    for schema in sorted(data_dir("schemas").glob("*.schema.json")):
        raw = schema.read_bytes()
        row = re.search(rf"<tr><td><code>{re.escape(schema.name)}</code></td>.*?</tr>", text)
        assert row is not None, schema.name
        assert json.loads(raw)["$id"] in row.group(0)
        assert hashlib.sha256(raw).hexdigest() in row.group(0)
    controller = text.split('id="machine-controller"', 1)[1].split("</article>", 1)[0]
    fence = GUARDS.get("fence")
    issue = UPDATES.get("issue_lease")
    assert fence is not None and fence.summary and issue is not None and issue.summary
    assert f"<code>fence(allow_expired=true)</code>: {html.escape(fence.summary)}" in controller
    assert f"<code>issue_lease</code>: {html.escape(issue.summary)}" in controller
    assert "<td><code>absent</code></td><td>initial</td>" in controller
    receipt = text.split('id="machine-receipt"', 1)[1].split("</article>", 1)[0]
    assert "intermediate" in receipt and "terminal" in receipt and "success →" in receipt
    turnstile = text.split('id="machine-turnstile"', 1)[1].split("</article>", 1)[0]
    assert "local," in turnstile and "<code>*</code> (every state that is not terminal" in turnstile
    local = text.split('id="recipe-local-review"', 1)[1].split("</article>", 1)[0]
    steps = re.findall(r"<tr><td>(\d+)</td><td><code>([^<]+)</code></td>", local)
    assert [s for _, s in steps] == ["acquire", "start", "relay", "note", "collect", "close", "release-controller"]
    assert "<td>finally</td>" in local and "<dt>extends</dt><dd>review</dd>" in local
    assert "reviewer.start</code><br><small>" in local and "<td><code>reviewer</code></td>" in local
    broken = text.split('id="machine-broken"', 1)[1].split("</article>", 1)[0]
    assert "does not validate" in broken and "error" in broken


@needs_graphviz
def test_pack_names_no_local_absolute_path(pack: tuple[Path, Any]) -> None:
    """The pack goes in a pull request: built-in sources relative to corral's data, local ones to
    where they were found from, never this machine's absolute paths."""
    path, _ = pack
    text = path.read_text(encoding="utf-8")
    root = path.parents[1]  # the directory the local machines and recipes were found in
    assert str(root) not in text and str(data_dir("machines")) not in text
    assert "built-in, machines/controller.yaml" in text and "built-in, recipes/review.yaml" in text
    assert "local, …/machines/turnstile.yaml" in text


def test_pack_references_nothing_outside_itself(pack: tuple[Path, Any]) -> None:
    path, _ = pack
    text = path.read_text(encoding="utf-8")
    outline = _outline(text)
    assert not outline.tags & {"script", "link", "img", "iframe", "object", "embed", "audio", "video", "source"}
    assert RESOURCE.findall(text) == [], "a resource outside the page"
    assert all(h.startswith("#") for h in outline.hrefs)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.IGNORECASE)
    assert "url(" not in text and "@import" not in text
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text
    assert "http://www.w3.org" not in text, "namespace declarations are stripped from the inlined SVG"
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids)), "two drawings share an element id"


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
@needs_graphviz
def test_pack_opens_offline_in_a_browser(tmp_path: Path, pack: tuple[Path, Any]) -> None:
    """Chromium with no network shows every name and a drawing for each, and fetches nothing."""
    browser = _browser()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI must provide chromium (.ci/run installs it)")
        pytest.skip("needs chromium (.ci/run installs it)")
    path, written = pack
    # The page has no script; a copy gets one that reports what was laid out and what was fetched.
    probe = path.with_name("probe.html")
    probe.write_text(
        path.read_text(encoding="utf-8").replace(
            "</body>",
            "<script>window.addEventListener('load', () => {"
            " const drawn = Array.from(document.querySelectorAll('article')).map(a => {"
            "  const svg = a.querySelector('svg'); const box = svg ? svg.getBoundingClientRect() : null;"
            "  return [a.className, a.dataset.name, box ? [Math.round(box.width), Math.round(box.height)] : null,"
            "          svg ? svg.querySelectorAll('g.node').length : 0]; });"
            " const fetched = performance.getEntriesByType('resource').map(r => r.name);"
            " document.body.dataset.report = JSON.stringify({drawn, fetched}); });</script></body>",
        )
    )
    dumps = {}
    for page in (path, probe):
        dumps[page.name] = subprocess.run(
            [
                browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
                f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom", page.as_uri(),
            ],
            capture_output=True, text=True, timeout=90, check=True,
        ).stdout  # fmt: skip
    dom = dumps[path.name]
    outline = _outline(dom)
    shown = {(a["class"], a["name"]): a["svg"] for a in outline.articles}
    for name in written.machines:
        assert shown.get(("machine", name)) == 1, name
        assert f"<h3>{name}</h3>" in dom
    for name in written.recipes:
        assert shown.get(("recipe", name)) == 1, name
        assert f"<h3>{name}</h3>" in dom
    report_attr = re.search(r'data-report="([^"]*)"', dumps[probe.name])
    assert report_attr is not None, dumps[probe.name][-2000:]
    report = json.loads(html.unescape(report_attr.group(1)))
    assert report["fetched"] == [], "the page fetched something"
    for kind, name, box, nodes in report["drawn"]:
        if "invalid" in kind:
            continue
        assert box is not None and box[0] > 50 and box[1] > 50, (name, box)
        assert nodes >= 2, (name, nodes)


@pytest.mark.slow
@needs_graphviz
def test_pack_fits_a_1400px_window_and_its_labels_are_legible(pack: tuple[Path, Any]) -> None:
    """At 1400 CSS px nothing scrolls sideways or crosses the margin, and every state label is >= 10 px high."""
    from tests.support.browser import lay_out

    path, written = pack
    layout = lay_out(path, width=1400)
    assert layout.requested == [], "the page asked for something outside itself"
    assert layout.client_width == 1400
    assert layout.scroll_width <= layout.client_width, layout.wide[:5]
    assert layout.wide == [], "an element wider than the viewport"
    assert layout.margin == [], "an element (a table, a drawing) past the page's margin"
    states = [label for label in layout.labels if label[0] == "machine"]
    assert {label[1] for label in states} == set(written.machines), "a machine drawn without state labels"
    small = [(drawing, text, round(height, 1)) for _, drawing, text, height, _ in states if height < 10]
    assert small == [], "state labels too small to read"
    # The contents read in order: the sections one under another in one column, and each section's
    # entries (in their columns) below its heading and above the next one.
    top = [entry for entry in layout.contents if entry[1] == 1]
    assert [entry[0] for entry in top] == ["Versions", "Machines", "Recipes"]
    assert len({entry[2] for entry in top}) == 1, f"the sections are not in one column: {top}"
    assert [entry[3] for entry in top] == sorted(entry[3] for entry in top)
    heading = None
    for entry in layout.contents:
        if entry[1] == 1:
            heading = entry
            continue
        assert heading is not None
        after = top[top.index(heading) + 1] if heading is not top[-1] else None
        assert entry[3] > heading[3] and (after is None or entry[3] < after[3]), (entry, heading, after)


@needs_graphviz
def test_cli_writes_the_pack(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CORRAL_RECIPES", raising=False)
    assert main(["review-pack"]) == 0
    out = capsys.readouterr().out.strip()
    assert Path(out) == Path("review-pack") / FILENAME and Path(out).is_file()
    assert main(["review-pack", "--out", str(tmp_path / "elsewhere"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["path"] == str(tmp_path / "elsewhere" / FILENAME)
    assert doc["machines"] == BUILTIN_MACHINES and sorted(doc["recipes"]) == BUILTIN_RECIPES
    assert doc["bytes"] == (tmp_path / "elsewhere" / FILENAME).stat().st_size


def test_without_graphviz_the_error_is_clear(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no 'dot' to be found
    assert main(["review-pack", "--out", str(tmp_path / "pack"), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "graphviz_unavailable"
    assert not (tmp_path / "pack" / FILENAME).exists()

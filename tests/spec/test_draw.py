"""Drawings: every transition labelled, and the Mermaid text really renders (Mermaid 11 in Chromium)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from runner.spec.draw import dot, label, mermaid, render
from runner.spec.library import Library

REPO = Path(__file__).resolve().parents[2]
MERMAID_JS = Path(os.environ.get("CORRAL_MERMAID_JS", REPO / ".cache/mermaid/node_modules/mermaid/dist/mermaid.min.js"))


def test_mermaid_has_one_edge_per_state_pair_with_every_transition() -> None:
    spec = Library().builtin("controller")
    text = mermaid(spec)
    edges = [line.strip() for line in text.splitlines() if "-->" in line and "[*]" not in line]
    pairs = [e.split(" : ")[0] for e in edges]
    assert len(pairs) == len(set(pairs)), "Mermaid shows only the last label of a repeated pair"
    for t in spec.transitions:
        assert any(label(t) in e for e in edges), t.trigger
    assert "[*] --> absent" in text


def test_dot_labels_every_transition_and_marks_states() -> None:
    spec = Library().builtin("controller")
    text = dot(spec)
    for t in spec.transitions:
        assert t.trigger in text
    assert '"__start" -> "absent"' in text


def test_two_phase_outcomes_are_dashed(tmp_path: Path) -> None:
    from runner.effects import EFFECTS

    if EFFECTS.get("draw_probe") is None:
        EFFECTS.add("draw_probe", lambda ctx: None)
    path = tmp_path / "job.yaml"
    path.write_text(
        "# yaml-language-server: $schema=x\nmachine: job\nversion: 1\ndescription: d\ninitial: idle\n"
        "states:\n  idle: {description: i}\n  running: {description: r, intermediate: true}\n"
        "  done: {description: d, terminal: true}\n  failed: {description: f, terminal: true}\n"
        "transitions:\n  - {trigger: run, source: idle, dest: running, effects: [draw_probe],"
        " outcomes: {success: done, failure: failed}}\n"
    )
    spec = Library().load(path)
    text = dot(spec)
    assert '"running" -> "done" [label="run: success", style=dashed]' in text
    assert '"running" -> "failed" [label="run: failure", style=dashed]' in text
    assert "run ! draw_probe" in text
    assert "class running intermediate" in mermaid(spec)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed (CI installs it)")
def test_svg_and_png_render() -> None:
    spec = Library().builtin("controller")
    svg = render(spec, "svg")
    assert isinstance(svg, str) and svg.lstrip().startswith("<?xml")
    root = ElementTree.fromstring(svg.encode())  # well-formed XML, an SVG root
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "takeover" in texts and "released" in texts
    png = render(spec, "png")
    assert isinstance(png, bytes) and png.startswith(b"\x89PNG")


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
@pytest.mark.parametrize("machine", ["controller", "reviewer", "receipt", "writer", "plan"])
def test_mermaid_renders_in_a_browser(tmp_path: Path, machine: str) -> None:
    """The drawing GitHub would show: Mermaid 11 renders it to an SVG without a parse error."""
    browser = _browser()
    if browser is None or not MERMAID_JS.is_file():
        if os.environ.get("CI"):
            pytest.fail("CI must provide chromium and mermaid (.ci/run installs both)")
        pytest.skip("needs chromium and mermaid.min.js (.ci/run installs both)")
    spec = Library().builtin(machine)
    text = mermaid(spec)
    page = tmp_path / "page.html"
    page.write_text(
        "<html><body><pre class='mermaid'>" + text + "</pre><script>" + MERMAID_JS.read_text() + "</script><script>"
        "mermaid.initialize({startOnLoad: false});"
        "mermaid.run().then(() => { const svg = document.querySelector('pre.mermaid svg');"
        " const labels = Array.from(svg.querySelectorAll('.edgeLabel')).map(e => e.textContent);"
        " document.title = 'OK ' + JSON.stringify(labels); })"
        ".catch(e => { document.title = 'ERROR ' + (e.message || e); });</script></body></html>"
    )
    dom = subprocess.run(
        [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=15000", "--dump-dom", page.as_uri(),
        ],
        capture_output=True, text=True, timeout=90, check=True,
    ).stdout  # fmt: skip
    title = dom.split("<title>", 1)[1].split("</title>", 1)[0] if "<title>" in dom else ""
    assert title.startswith("OK "), title or dom[-2000:]
    labels = " ".join(json.loads(title[3:].replace("&amp;", "&").replace("&quot;", '"')))
    for trigger in spec.triggers():
        assert trigger in labels

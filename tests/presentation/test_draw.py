"""Drawings: every transition labelled, and the Mermaid text really renders (Mermaid 11 in Chromium)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from runner.definitions.library import Library
from runner.presentation.draw import WRAP, dot, label, mermaid, render, wrap

REPO = Path(__file__).resolve().parents[2]
MERMAID_JS = Path(os.environ.get("CORRAL_MERMAID_JS", REPO / ".cache/mermaid/node_modules/mermaid/dist/mermaid.min.js"))


def test_mermaid_has_one_edge_per_state_pair_with_every_transition() -> None:
    spec = Library().builtin("controller")
    text = mermaid(spec)
    edges = [line.strip() for line in text.splitlines() if "-->" in line and "[*]" not in line]
    pairs = [e.split(" : ")[0] for e in edges]
    assert len(pairs) == len(set(pairs)), "Mermaid shows only the last label of a repeated pair"
    for t in spec.transitions:  # wrapped at spaces: the lines joined by spaces give each label back
        assert any(label(t) in e.replace("<br/>", " ") for e in edges), t.trigger
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


def test_machines_are_laid_out_top_to_bottom_with_wrapped_labels() -> None:
    """Width is what a page lacks: every machine runs top to bottom, no label line much over WRAP characters."""
    for name in ("controller", "reviewer", "receipt", "writer", "plan", "pane"):
        spec = Library().builtin(name)
        assert "  rankdir=TB;" in dot(spec).splitlines(), name
        assert mermaid(spec).splitlines()[1] == "    direction TB", name
        for line in dot(spec).splitlines():
            if " -> " in line and 'label="' in line:
                text = line.split('label="', 1)[1].split('"', 1)[0]
                for part in text.replace("\\l", "\n").replace("\\n", "\n").split("\n"):
                    assert len(part) <= WRAP or " " not in part.strip(), (name, part)


def test_wrap_keeps_every_word_and_starts_updates_and_effects_on_new_lines() -> None:
    text = label(next(t for t in Library().builtin("writer").transitions if t.trigger == "start"))
    lines = wrap(text)
    assert " ".join(lines) == text
    assert all(len(line) <= WRAP for line in lines)
    assert sum(line.startswith("/ ") for line in lines) == 1 and lines[-1] == "! start_agent"
    assert wrap("renew [fence] / extend_lease") == ["renew [fence] / extend_lease"], "a short label stays whole"
    assert wrap("x" * 50) == ["x" * 50], "a name is never broken"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("dot") is None and not os.environ.get("CI"), reason="needs Graphviz (CI has it)")
def test_drawn_writer_fits_a_1400px_window(tmp_path: Path) -> None:
    """``corral draw writer --format svg`` opened in Chromium at 1400 px: no sideways scroll, labels >= 10 px."""
    from tests.support.browser import lay_out

    picture = tmp_path / "writer.svg"
    subprocess.run(
        [sys.executable, "-m", "runner.cli", "draw", "writer", "--format", "svg", "--out", str(picture)],
        check=True, capture_output=True, timeout=60, env={**os.environ, "CORRAL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    layout = lay_out(picture, width=1400)
    assert layout.requested == []
    assert layout.scroll_width <= layout.client_width == 1400, layout.wide[:5]
    assert layout.wide == []
    spec = Library().builtin("writer")
    shown = {text: height for _, _, text, height, _ in layout.labels}
    assert set(spec.states) <= set(shown), "every state is labelled"
    assert {s: round(shown[s], 1) for s in spec.states if shown[s] < 10} == {}, "state labels too small to read"

"""``scripts/demo.sh`` (what ``make demo`` runs) completes without Bubblewrap or Graphviz, saying what it skipped.

The real script runs in a scratch copy of its directory layout with the real ``corral`` executable, on
a PATH built from this machine's: every program but the ones taken away, or with a ``bwrap`` that
cannot start a sandbox (as in a container that refuses user namespaces).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hermetic_git")]


def _path_without(root: Path, missing: set[str], extra: dict[str, str] | None = None) -> str:
    """A PATH of links to every program on this one except ``missing``, plus ``extra`` scripts, venv first."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not Path(directory).is_dir():
            continue
        for program in Path(directory).iterdir():
            link = bin_dir / program.name
            if program.name in missing or link.exists() or link.is_symlink():
                continue
            if program.is_file() and os.access(program, os.X_OK):
                link.symlink_to(program)
    for name, text in (extra or {}).items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return f"{Path(sys.executable).parent}{os.pathsep}{bin_dir}"


def _demo(root: Path, path: str) -> subprocess.CompletedProcess[str]:
    (root / "scripts").mkdir()
    for name in ("demo.sh", "mcp_demo.py"):  # mcp_demo.py: the MCP client demo.sh runs
        shutil.copy2(REPO / "scripts" / name, root / "scripts" / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env |= {"PATH": path, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    script = root / "scripts" / "demo.sh"
    return subprocess.run(
        ["bash", str(script)], cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_demo_without_bubblewrap_or_graphviz_skips_those_steps(tmp_path: Path) -> None:
    path = _path_without(tmp_path, {"bwrap", "dot"})
    assert shutil.which("bwrap", path=path) is None and shutil.which("dot", path=path) is None
    run = _demo(tmp_path, path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "note: Bubblewrap is missing or cannot start a sandbox here" in out
    assert "note: Graphviz is not installed" in out
    assert "-> skipped: no usable Bubblewrap, and corral never runs validations unsandboxed" in out
    assert "-> skipped: the writer-lane plan: its verify step needs a usable Bubblewrap" in out
    assert "-> skipped: the review pack draws with Graphviz" in out
    assert "-> skipped: the SVG drawings .demo/*.svg need Graphviz" in out
    assert "stateDiagram-v2" in out, "the Mermaid drawing needs nothing and is still shown"
    assert "demo-review" in out and "demo-writer-lane" not in out
    assert "done: state home in .demo/home" in out
    # The MCP part: the SDK's client against the real `corral mcp`, its own controller, no token in any result.
    assert "-> tools/list: " in out and "corral_controller_acquire: controller mcp-demo: active, generation 1" in out
    assert "-> corral_controller_release: controller mcp-demo: released" in out
    assert "-> none of the 4 results carried the token; the credential file is removed on release" in out
    assert not list((tmp_path / ".demo").glob("*.svg")) and not (tmp_path / ".demo" / "review-pack").exists()


@pytest.mark.skipif(shutil.which("dot") is None and not os.environ.get("CI"), reason="needs Graphviz (CI has it)")
def test_demo_with_an_unusable_bubblewrap_skips_the_sandbox_and_still_draws(tmp_path: Path) -> None:
    refusing = "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    path = _path_without(tmp_path, {"bwrap"}, {"bwrap": refusing})
    run = _demo(tmp_path, path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "note: Bubblewrap is missing or cannot start a sandbox here" in out
    assert "-> skipped: no usable Bubblewrap" in out and "-> skipped: the writer-lane plan" in out
    assert "Graphviz is not installed" not in out
    assert (tmp_path / ".demo" / "review-pack" / "index.html").is_file()
    for machine in ("controller", "reviewer", "receipt", "writer"):
        assert (tmp_path / ".demo" / f"{machine}.svg").read_text().lstrip().startswith("<?xml"), machine

"""The package's public names resolve, and importing the package itself stays cheap."""

from __future__ import annotations

import subprocess
import sys

import runner


def test_every_public_name_resolves() -> None:
    assert set(runner.__all__) == {*runner._EXPORTS, "__version__"}
    for name in runner.__all__:
        assert getattr(runner, name) is not None
    assert runner.Service.__name__ == "Service"


def test_import_runner_loads_nothing_heavy() -> None:
    code = "import sys, runner; print(sorted(m for m in sys.modules if m.startswith(('runner.', 'transitions'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['runner._version']"

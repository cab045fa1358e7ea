"""The package's public names resolve, and importing the package itself stays cheap."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import runner


def test_every_public_name_is_the_object_its_module_defines() -> None:
    assert set(runner.__all__) == {*runner._EXPORTS, "__version__"}
    for name, module in runner._EXPORTS.items():
        assert getattr(runner, name) is getattr(importlib.import_module(module), name), name
    assert runner.__version__ == importlib.import_module("runner._version").__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", runner.__version__)
    errors = [name for name, module in runner._EXPORTS.items() if module == "runner.errors"]
    assert all(issubclass(getattr(runner, name), runner.CorralError) for name in errors), errors
    with pytest.raises(AttributeError, match="has no attribute 'Nonesuch'"):
        runner.Nonesuch  # noqa: B018  (the lookup is the test)


def test_import_runner_loads_nothing_heavy() -> None:
    code = "import sys, runner; print(sorted(m for m in sys.modules if m.startswith(('runner.', 'transitions'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['runner._version']"

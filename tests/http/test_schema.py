"""Schemathesis against the OpenAPI document a real ``corral serve`` serves, in a scratch home: no
response is a 5xx, and every response keeps to the document (status codes, content types, schemas).

Bounded: a few examples per operation (the coverage phase adds its boundary values), a fixed seed,
no example database; it takes one to two minutes on a loaded machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.http.conftest import Served, server_env

pytestmark = pytest.mark.slow

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.mark.timeout(900)
def test_schemathesis_finds_no_server_error_and_no_undocumented_response(
    serve: Any, tmp_path: Path, state_home: Path
) -> None:
    served: Served = serve()
    url = served.base_url
    run = subprocess.run(
        [
            sys.executable, "-m", "schemathesis.cli", "run", f"{url}/api/openapi.json", "--url", url,
            "--checks", CHECKS, "--max-examples", "5", "--workers", "2", "--phases", "coverage,fuzzing",
            "--seed", "2", "--generation-database", "none", "--no-shrink", "--no-color", "--max-failures", "20",
        ],
        env=server_env(state_home), cwd=tmp_path, capture_output=True, text=True, timeout=850, check=False,
    )  # fmt: skip
    summary = run.stdout[-6000:]
    assert run.returncode == 0, summary + run.stderr[-2000:]
    assert "passed" in summary and "failure" not in summary.split("Test cases:")[-1], summary
    assert "Internal Server Error" not in run.stdout
    assert "Traceback" not in served.stderr()

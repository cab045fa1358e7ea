"""``corral_check``: the model checker over MCP, by names only."""

from __future__ import annotations

from pathlib import Path

from tests.mcp.conftest import InProcess


def test_corral_check_answers_the_report_and_refuses_paths(mcp_home: Path) -> None:
    with InProcess(mcp_home) as server:
        doc = server.ok("corral_check", {"names": ["controller", "review"], "actors": 2})
        assert (doc["ok"], doc["code"]) == (True, None)
        assert {"controller", "plan", "plan@review", "reviewer", "receipt"} == {m["machine"] for m in doc["machines"]}
        assert all(m["actors"] == 2 and m["violations"] == [] for m in doc["machines"])
        assert doc["recipes"][0]["recipe"] == "review"

        refused = server.call("corral_check", {"names": ["/tmp/controller.yaml"]})
        assert refused.is_error and "reads no file" in str(refused.content)
        too_many = server.call("corral_check", {"names": ["controller"], "actors": 9})
        assert too_many.is_error and "check_limit" in str(too_many.content)
        assert too_many.structured_content["error"]["details"]["field"] == "actors"

"""Fixtures for the agent host tests: anyio's backend.

The contract fake of ``herdr`` (the ``fake_herdr`` fixture and the ``fake_herdr`` module) is
registered by the top-level ``tests/conftest.py``, so that the service suite over both hosts
(``tests/service/test_hosts.py``) can use it too.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

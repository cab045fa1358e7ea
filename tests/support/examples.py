"""Hypothesis example counts: the full count under ``make test`` and CI, a tenth (at least 10) under
``make test-fast``, which sets ``CORRAL_TEST_FAST=1`` (the edit-test loop samples; the full run searches).

``tests/conftest.py`` loads the matching profile for properties with no count of their own
(Hypothesis' default of 100, or 10 in the fast run); a property that names a count writes
``settings(max_examples=examples(300))`` so that the fast run scales it too.
"""

from __future__ import annotations

import os

FAST = os.environ.get("CORRAL_TEST_FAST") == "1"
FAST_DEFAULT = 10


def examples(full: int) -> int:
    """``full`` examples, or a tenth of them (at least ``FAST_DEFAULT``) in the fast run."""
    return max(FAST_DEFAULT, full // 10) if FAST else full

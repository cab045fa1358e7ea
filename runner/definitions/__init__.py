"""Definitions: load YAML machines, validate them (JSON Schema, lint) and build transition tables.

Definitions do no I/O beyond reading their files and the spec cache, and never run code named in
a file: guard, update and effect names resolve through corral's registries only.
"""

from __future__ import annotations

from runner.definitions.library import Library, Report, validate_file
from runner.definitions.model import MachineSpec, Ref, StateSpec, TransitionSpec
from runner.definitions.table import TransitionTable

__all__ = ["Library", "MachineSpec", "Ref", "Report", "StateSpec", "TransitionSpec", "TransitionTable", "validate_file"]

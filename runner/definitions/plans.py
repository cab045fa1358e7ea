"""Plan documents: what a coordinator submits, checked against ``schemas/plan.schema.json``.

Beside :mod:`runner.definitions.recipes` (the recipes a plan names); the plan runner and the
``validate`` operation both check a document here, so neither imports the other.
"""

from __future__ import annotations

from typing import Any


def check_plan_document(doc: Any, where: str = "plan") -> dict[str, Any]:
    """The plan document checked against ``schemas/plan.schema.json``.

    Raises:
        InputError: ``plan_invalid``, naming the field and where.
    """
    from runner.documents import schema

    schema.refuse_invalid(schema.validator("plan"), doc, "plan_invalid", where)
    return dict(doc)

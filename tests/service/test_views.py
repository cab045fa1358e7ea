"""The record views behave as the frozen dataclasses they replaced (issue 13: cold start).

``LeaseView``, ``Grant``, ``AgentLeaseView``, ``CloseResult``, ``ReceiptView``, ``CollectResult`` and
``AskManyResult`` are on every command's import path, so they are :class:`Record` subclasses instead
of ``@dataclass(frozen=True)`` classes. Each is held here to a frozen dataclass with the same fields,
defaults and hidden fields, built in the test: the same constructor calls, equality, hash, ``repr``,
``match`` and refusal to change.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from runner.fence import Credential
from runner.service import (
    AgentLeaseView,
    AskManyResult,
    CloseResult,
    CollectResult,
    Grant,
    LeaseView,
    ReceiptView,
)
from runner.service.views.records import Record

CREDENTIAL = Credential("ctl", "00000000-0000-4000-8000-000000000000", 1, "s" * 43)
LEASE = LeaseView("ctl", "active", 3, False, {"controller_id": "ctl", "generation": 1})
AGENT = AgentLeaseView("reviewer/r1", "reviewer", "idle", 2, {"name": "r1"})
RECEIPT = ReceiptView("pending", 1, {"token": "t"})
# Each record, the positional arguments of one instance, and the fields a dataclass would hide.
CASES: list[tuple[type[Record], tuple[Any, ...], tuple[str, ...]]] = [
    (LeaseView, ("ctl", "active", 3, False, {"generation": 1}), ()),
    (Grant, (LEASE, CREDENTIAL, 7), ("credential",)),
    (AgentLeaseView, ("reviewer/r1", "reviewer", "idle", 2, {"name": "r1"}), ()),
    (CloseResult, (AGENT, "secret output"), ("output",)),
    (ReceiptView, ("pending", 1, {"token": "t"}), ()),
    (CollectResult, (RECEIPT, "secret output", True), ("output",)),
    (AskManyResult, ([CollectResult(RECEIPT, "x")], [RECEIPT]), ()),
]


def _twin(cls: type[Record], hidden: tuple[str, ...]) -> type[Any]:
    """A frozen dataclass with ``cls``'s fields, defaults and hidden fields, named like it."""
    parameters = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in parameters] == list(cls._fields), "the constructor takes the fields in order"
    specs = [
        (
            p.name,
            Any,
            dataclasses.field(
                repr=p.name not in hidden, **({} if p.default is inspect.Parameter.empty else {"default": p.default})
            ),
        )
        for p in parameters
    ]
    return dataclasses.make_dataclass(cls.__name__, specs, frozen=True)


@pytest.mark.parametrize(("cls", "args", "hidden"), CASES, ids=[c[0].__name__ for c in CASES])
def test_a_record_behaves_as_the_frozen_dataclass_it_replaced(
    cls: type[Record], args: tuple[Any, ...], hidden: tuple[str, ...]
) -> None:
    twin = _twin(cls, hidden)
    record, by_keyword, expected = cls(*args), cls(**dict(zip(cls._fields, args, strict=True))), twin(*args)
    assert cls._hidden == hidden
    assert repr(record) == repr(expected)
    assert "secret" not in repr(record) and CREDENTIAL.token not in repr(record)
    assert record == by_keyword
    assert not record != by_keyword  # noqa: SIM202  # __ne__ is the inverse of __eq__
    assert record != expected, "a record equals only its own class, as a dataclass does"
    assert cls.__match_args__ == twin.__match_args__
    for name, value in zip(cls._fields, args, strict=True):
        assert getattr(record, name) is value
    other = cls(*args[:-1], "something else")
    assert record != other and (record == other) == (expected == twin(*args[:-1], "something else"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, cls._fields[0], None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(record, cls._fields[0])
    try:
        expected_hash: int | type[BaseException] = hash(expected)
    except TypeError:
        expected_hash = TypeError
    if expected_hash is TypeError:
        with pytest.raises(TypeError):
            hash(record)
    else:
        assert hash(record) == expected_hash == hash(by_keyword)


def test_defaults_and_match_work_as_they_did() -> None:
    collected = CollectResult(RECEIPT, "out")
    assert collected.replayed is False and collected.to_dict()["replayed"] is False
    match LEASE:
        case LeaseView(controller, state, version, expired, _):
            assert (controller, state, version, expired) == ("ctl", "active", 3, False)
        case _:
            pytest.fail("a LeaseView matches by position")
    with pytest.raises(TypeError):
        CloseResult(AGENT)  # type: ignore[call-arg]  # output has no default
    assert Grant(LEASE, CREDENTIAL, 7).lease.to_dict()["generation"] == 1

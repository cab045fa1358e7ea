"""The one timestamp format, whatever the moment's zone and however often a moment repeats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from runner.context import format_time, parse_time

moments = st.datetimes(
    min_value=datetime(1971, 1, 1),
    max_value=datetime(9998, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
)


def _reference(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@given(st.lists(moments, min_size=1, max_size=6))
def test_format_time_is_utc_with_microseconds_and_a_z(sequence: list[datetime]) -> None:
    # Repeats and neighbours in other zones: the last-moment memo must never answer for another moment.
    for moment in [*sequence, *sequence[::-1], sequence[0]]:
        text = format_time(moment)
        assert text == _reference(moment)
        assert parse_time(text) == moment


def test_the_same_instant_in_two_zones_formats_alike_and_a_naive_time_is_local() -> None:
    utc = datetime(2026, 12, 1, 12, 0, 0, 1, tzinfo=UTC)
    east = utc.astimezone(timezone(timedelta(hours=2)))
    assert format_time(utc) == format_time(east) == format_time(utc) == "2026-12-01T12:00:00.000001Z"
    naive = datetime(2026, 12, 1, 12, 0, 0)
    assert format_time(naive) == _reference(naive.astimezone())
    assert format_time(utc + timedelta(microseconds=1)) == "2026-12-01T12:00:00.000002Z"


def test_records_with_hand_written_inits_stay_frozen_dataclasses() -> None:
    import dataclasses

    import pytest

    from runner.context import Context, Event, Instance, Update
    from runner.engine import Request, Result

    one = Instance("a/1", "a", "start", 1, {"x": 1})
    assert one == Instance(id="a/1", machine="a", state="start", version=1, data={"x": 1})
    assert (one.created_at, one.updated_at) == (None, None)
    assert dataclasses.replace(one, version=2).version == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.state = "other"  # type: ignore[misc]  # reason: frozen, as the test shows
    event = Event(1, "a/1", "a", "go", "start", "end", 2, "me", {}, "2026-01-01T00:00:00.000000Z")
    assert event.to_dict()["from"] == "start" and "payload={}" in repr(event)
    first, second = Update(), Update()
    assert first.data == {} and first.data is not second.data and first.claims is None
    request = Request("a/1", "go", secrets={"token": "SECRET-42"})
    assert request.params == {} and request.actor == "unknown" and "SECRET-42" not in repr(request)
    assert Result(one, (event,)).reply == {}
    ctx = Context(one, "go", {}, {}, {}, datetime.now(UTC), None, "me")  # type: ignore[arg-type]  # reason: no view needed
    assert ctx.data == {} and ctx.resources == {} and ctx.gate is None
    assert [f.name for f in dataclasses.fields(Context)][-3:] == ["data", "resources", "gate"]

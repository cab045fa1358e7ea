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

"""Issue 13: the service's listings page by keyset (``Page.next_after``), live by default, and their
inputs refuse a bad page; a filtered page reads on past the rows its filter rejects."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.context import Instance
from runner.errors import InputError
from runner.runtime import Config, Runtime
from runner.service import (
    AdoptedListInput,
    ListLeasesInput,
    Page,
    ReceiptsInput,
    ReleaseInput,
    ReviewerListInput,
    Service,
)
from runner.service.inputs.plans import PlanListInput
from runner.store import Store

SHA = "a" * 64


def _fill(store: Store, machine: str, states: tuple[str, ...], count: int, seed: int) -> list[Instance]:
    rng = random.Random(seed)
    with store.write() as tx:
        return [
            tx.put(
                Instance(f"{machine}/{rng.randrange(10**9):09d}-{n}", machine, "absent", 0, {}),
                states[n % len(states)],
                {"controller_id": "ctl" if rng.random() < 0.1 else "other", "name": f"n{n}", "token": f"rcpt_{n}"},
            )
            for n in range(count)
        ]


def _walk(listing: Callable[[str | None], Page[Any]], key: Callable[[Any], str]) -> list[str]:
    walked: list[str] = []
    after = None
    while True:
        page = listing(after)
        assert isinstance(page, list) and isinstance(page, Page)
        walked += [key(row) for row in page]
        if page.next_after is None:
            return walked
        assert page, "a page with a cursor has rows"
        after = page.next_after


def test_a_filtered_page_reads_past_what_the_filter_rejects(service: Service, store: Store) -> None:
    """600 reviewer leases, a tenth of them the controller's: pages of 7 still visit exactly its own."""
    written = _fill(store, "reviewer", ("active", "closed"), 600, seed=1)
    mine = sorted(i.id for i in written if i.data["controller_id"] == "ctl" and i.state == "active")
    walked = _walk(lambda after: service.reviewers(ReviewerListInput("ctl", False, after, 7)), lambda v: v.id)
    assert walked == mine and len(mine) > 7
    everything = _walk(lambda after: service.reviewers(ReviewerListInput(None, True, after, 50)), lambda v: v.id)
    assert everything == sorted(i.id for i in written)
    whole = service.reviewers(ReviewerListInput("ctl"))
    assert [v.id for v in whole] == mine and whole.next_after is None, "no limit: one page, no cursor"


def test_every_listing_pages_and_is_live_by_default(
    service: Service, store: Store, acquire: Any, tmp_path: Path
) -> None:
    for name in ("c1", "c2", "c3"):
        acquire(name)
    released = acquire("c4")
    service.controller.release(ReleaseInput("c4", released.credential, "done", SHA))
    held = [v.controller_id for v in service.controller.leases(ListLeasesInput())]
    assert held == ["c1", "c2", "c3"], "released leases only with include_ended"
    walked = _walk(lambda a: service.controller.leases(ListLeasesInput(None, True, a, 1)), lambda v: v.controller_id)
    assert walked == ["c1", "c2", "c3", "c4"]
    assert [v.state for v in service.controller.leases(ListLeasesInput("c4"))] == ["released"], "one id in any state"
    adopted = _fill(store, "adopted", ("active", "released"), 20, seed=2)
    walked = _walk(lambda a: service.adopted.leases(AdoptedListInput(None, False, a, 3)), lambda v: v.id)
    assert walked == sorted(i.id for i in adopted if i.state == "active")
    writers = _fill(store, "writer", ("active", "released"), 20, seed=3)
    walked = _walk(lambda a: service.writers(None, True, after=a, limit=4), lambda v: v.id)
    assert walked == sorted(i.id for i in writers)
    receipts = _fill(store, "receipt", ("pending", "completed"), 30, seed=4)
    walked = _walk(lambda a: service.receipts(ReceiptsInput(None, (), False, a, 4)), lambda v: v.token)
    pending = sorted((i for i in receipts if i.state == "pending"), key=lambda i: i.id)
    assert sorted(walked) == sorted(i.data["token"] for i in pending) and len(walked) == len(set(walked))
    plans = _fill(store, "plan", ("submitted", "succeeded", "failed"), 12, seed=5)
    with store.write() as tx:  # plan ids are what the listing pages by
        for plan in plans:
            tx.put(plan, plan.state, {**plan.data, "plan_id": plan.id.partition("/")[2]})
    with Runtime.open(Config.load(store=store.url, home=tmp_path / "home", environ={})) as runtime:
        walked = _walk(lambda a: runtime.service.plans.list(PlanListInput(False, a, 2)), lambda p: p.id)
    assert walked == sorted(i.id for i in plans if i.state != "succeeded"), "failed plans are not finished"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: ListLeasesInput(limit=0), "limit"),
        (lambda: ListLeasesInput(limit=10_001), "limit"),
        (lambda: ReviewerListInput(limit=True), "limit"),
        (lambda: AdoptedListInput(after=""), "after"),
        (lambda: ReceiptsInput(after="x" * 301), "after"),
        (lambda: ReceiptsInput(after="a\nb"), "after"),
        (lambda: PlanListInput(limit=-1), "limit"),
    ],
)
def test_a_bad_page_is_refused_on_construction(make: Callable[[], Any], field: str) -> None:
    with pytest.raises(InputError) as caught:
        make()
    assert caught.value.details["field"] == field


def test_writer_listing_checks_its_arguments(service: Service) -> None:
    with pytest.raises(InputError) as caught:
        service.writers(limit=0)
    assert caught.value.details["field"] == "limit"
    assert ListLeasesInput(limit=10_000).limit == 10_000 and ReviewerListInput(limit=1).limit == 1

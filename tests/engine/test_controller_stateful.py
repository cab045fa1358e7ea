"""The controller lease lifecycle, driven by Hypothesis against a model, on a real SQLite file.

Several holders share two controller ids and acquire, renew, resume, take over, release, look at
the listing and replay old or forged credentials, while the store's clock is moved by hand. Every
call's outcome (success, or the exact refusal code) is predicted by a small model of the lease; the
invariants are checked after every step against the store itself:

- generations only grow, by one per grant, across releases and re-acquires;
- at most one issued token opens a lease (the stored hash matches exactly the model's current one);
- every stale or forged credential is refused;
- the event log's seq strictly increases and each lease's version equals its number of events;
- no token, and no token hash, ever appears in the event log (nor a raw token in the database file).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from runner import fence
from runner.context import format_time
from runner.errors import CorralError, NotFoundError, RefusedError
from runner.fence import Credential
from runner.service import (
    TTL_MIN,
    AcquireInput,
    EventsInput,
    Grant,
    LeaseView,
    ListLeasesInput,
    ReleaseInput,
    RenewInput,
    ResumeInput,
    Service,
    TakeoverInput,
)
from runner.sql.store_sqlite import SQLiteStore
from tests.support.specs import shared_library

pytestmark = pytest.mark.slow  # a Hypothesis state machine

HOLDERS = ("h0@host", "h1@host", "h2@host")
CONTROLLERS = ("alpha", "beta")
SHA = hashlib.sha256(b"authority").hexdigest()
CHECKPOINT_SHA = hashlib.sha256(b"checkpoint").hexdigest()
FENCED_OPS = ("renew", "resume", "release")
GRANTS = ("acquire", "resume", "takeover")


ttls = st.one_of(st.sampled_from([TTL_MIN, 60, 900]), st.integers(TTL_MIN, 1800))
renew_ttls = st.one_of(st.none(), ttls)


class ManualClock:
    """The store's clock: starts at a fixed moment and moves only when the machine says so.

    The same as conftest's ``FakeClock``; a state machine builds its own store and cannot use fixtures.
    """

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class LeaseModel:
    """What the store should hold for one controller id."""

    state: str = "absent"
    lease_id: str | None = None
    generation: int = 0
    token: str | None = None  # Invariant: None unless state == "active"
    ttl: int = 0
    expires_at: datetime | None = None
    version: int = 0
    lease_ids: set[str] = field(default_factory=set)  # every lease id ever granted here


class ControllerLeases(RuleBasedStateMachine):
    issued = Bundle("issued")  # (holder, credential) for every credential ever granted

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="corral-stateful-"))
        self.clock = ManualClock()
        self.store = SQLiteStore(self.dir / "corral.db", clock=self.clock)
        self.service = Service(self.store, shared_library(), actor="stateful")
        self.model = {c: LeaseModel() for c in CONTROLLERS}
        self.wallet: dict[tuple[str, str], Credential] = {}  # what each holder last got, maybe stale by now
        self.seen: dict[tuple[str, str], str] = {}  # the lease id each holder last saw listed
        self.secrets: set[str] = set()  # every token issued, and every forged one presented
        self.last_seq = 0  # Invariant: the newest seq in the event log (refusals write nothing)

    def teardown(self) -> None:
        try:
            self.store.close()  # the last connection checkpoints the WAL into the main file
            raw = b"".join(p.read_bytes() for p in self.dir.glob("corral.db*"))
            for token in self.secrets:
                assert token.encode() not in raw, "a raw fence token is stored in the database"
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- model helpers --------------------------------------------------------------------------

    def expired(self, controller: str) -> bool:
        lease = self.model[controller]
        return lease.expires_at is not None and lease.expires_at <= self.clock.now

    def is_current(self, controller: str, cred: Credential) -> bool:
        lease = self.model[controller]
        return lease.state == "active" and (cred.lease_id, cred.generation, cred.token) == (
            lease.lease_id,
            lease.generation,
            lease.token,
        )

    def expect_fenced(self, controller: str, op: str, cred: Credential) -> frozenset[str] | None:
        """The refusal codes allowed for ``op`` with ``cred`` now, or None if it must succeed."""
        lease = self.model[controller]
        if lease.state == "absent":
            return frozenset({"controller_unknown"})
        if lease.state == "released":
            return frozenset({"fence_stale"})  # every fenced trigger, not only release
        if not self.is_current(controller, cred):
            return frozenset({"fence_stale"})
        if op == "renew" and self.expired(controller):
            return frozenset({"lease_expired"})
        return None

    def check_view(self, view: LeaseView, controller: str) -> None:
        lease = self.model[controller]
        assert view.controller_id == controller
        assert view.state == lease.state
        assert view.version == lease.version
        assert view.expired == (lease.state == "active" and self.expired(controller))
        assert view.data["lease_id"] == lease.lease_id
        assert view.data["generation"] == lease.generation
        assert view.data["ttl_seconds"] == lease.ttl
        assert lease.expires_at is not None
        assert view.data["expires_at"] == format_time(lease.expires_at)
        assert "token_sha256" not in view.data and "token" not in view.data

    def new_event(self, trigger: str, controller: str) -> int:
        """The one event a successful call appended; returns its seq."""
        events = self.service.events(EventsInput(since=self.last_seq))
        lease = self.model[controller]
        assert [(e.trigger, e.instance_id, e.version) for e in events] == [
            (trigger, fence.instance_id(controller), lease.version)
        ]
        assert events[0].seq > self.last_seq
        self.last_seq = events[0].seq
        return self.last_seq

    def record_grant(self, grant: Grant, controller: str, holder: str, trigger: str, ttl: int | None) -> Credential:
        lease = self.model[controller]
        cred = grant.credential
        self.secrets.add(cred.token)
        assert cred.controller_id == controller
        # Invariant: generations only grow, by exactly one per grant, whatever happened in between.
        assert cred.generation == lease.generation + 1
        assert cred.lease_id not in lease.lease_ids, "a lease id was reused"
        assert len(cred.token) == 2 * fence.TOKEN_BYTES and cred.token != lease.token
        predecessor = lease.lease_id if lease.state == "active" else None
        lease.state = "active"
        lease.lease_id = cred.lease_id
        lease.lease_ids.add(cred.lease_id)
        lease.generation = cred.generation
        lease.token = cred.token
        lease.ttl = ttl or lease.ttl
        lease.expires_at = self.clock.now + timedelta(seconds=lease.ttl)
        lease.version += 1
        self.check_view(grant.lease, controller)
        assert grant.lease.data["predecessor_lease_id"] == predecessor
        assert grant.lease.data["holder"] == holder
        assert self.new_event(trigger, controller) == grant.event_seq
        self.wallet[holder, controller] = cred
        return cred

    def fenced(
        self,
        op: str,
        holder: str,
        controller: str,
        cred: Credential,
        ttl: int | None = None,
        *,
        forged_hash: bool = False,
    ) -> Credential | None:
        """Call a credential-bearing operation and check it against the model; returns a new credential if any."""
        expected = self.expect_fenced(controller, op, cred)
        stale = not self.is_current(controller, cred)
        if cred.token and not forged_hash:
            self.secrets.add(cred.token)
        try:
            if op == "renew":
                outcome: object = self.service.controller.renew(RenewInput(controller, cred, ttl))
            elif op == "resume":
                outcome = self.service.controller.resume(ResumeInput(controller, cred, ttl, holder))
            else:
                outcome = self.service.controller.release(ReleaseInput(controller, cred, "commit 1234", CHECKPOINT_SHA))
        except (RefusedError, NotFoundError) as exc:
            assert expected is not None, f"{op} with a current credential was refused: {exc.code}: {exc.message}"
            assert exc.code in expected, f"{op}: expected {sorted(expected)}, got {exc.code}: {exc.message}"
            if exc.code == "controller_unknown":
                assert isinstance(exc, NotFoundError)
            event(f"{op}: {exc.code}{' (stale)' if stale else ''}")
            return None
        event(f"{op}: ok")
        assert expected is None, f"{op} succeeded where the model expected {sorted(expected)}"
        assert not stale
        lease = self.model[controller]
        if op == "renew":
            assert isinstance(outcome, LeaseView)
            lease.ttl = ttl or lease.ttl
            lease.expires_at = self.clock.now + timedelta(seconds=lease.ttl)
            lease.version += 1
            self.check_view(outcome, controller)
            assert outcome.data["renewed_at"] == format_time(self.clock.now)
            self.new_event("renew", controller)
        elif op == "resume":
            assert isinstance(outcome, Grant)
            return self.record_grant(outcome, controller, holder, "resume", ttl)
        else:
            assert isinstance(outcome, LeaseView)
            lease.state = "released"
            lease.token = None
            lease.version += 1
            self.check_view(outcome, controller)
            assert outcome.data["checkpoint_ref"] == "commit 1234"
            assert outcome.data["released_at"] == format_time(self.clock.now)
            self.new_event("release", controller)
        return None

    # --- rules: the normal lifecycle ------------------------------------------------------------

    @initialize(target=issued, holder=st.sampled_from(HOLDERS), ttl=ttls)
    def first_acquire(self, holder: str, ttl: int) -> object:
        """Every run starts with one lease held; the other controller id starts absent."""
        return self.acquire(holder, CONTROLLERS[0], ttl)

    @rule(target=issued, holder=st.sampled_from(HOLDERS), controller=st.sampled_from(CONTROLLERS), ttl=ttls)
    def acquire(self, holder: str, controller: str, ttl: int) -> object:
        lease = self.model[controller]
        try:
            grant = self.service.controller.acquire(AcquireInput(controller, "TICKET-1", SHA, ttl, holder))
        except RefusedError as exc:
            assert lease.state == "active", f"acquire of a {lease.state} lease was refused: {exc.message}"
            assert exc.code == "lease_held"
            assert exc.details["expired"] == self.expired(controller)
            assert exc.details["lease_id"] == lease.lease_id
            event("acquire: lease_held")
            return multiple()  # nothing goes into the bundle
        event("acquire: ok")
        assert lease.state in ("absent", "released"), "acquire took a lease that was still held"
        return (holder, self.record_grant(grant, controller, holder, "acquire", ttl))

    @precondition(lambda self: self.wallet)
    @rule(data=st.data(), ttl=renew_ttls)
    def renew(self, data: st.DataObject, ttl: int | None) -> None:
        holder, controller = data.draw(st.sampled_from(sorted(self.wallet)), label="wallet")
        self.fenced("renew", holder, controller, self.wallet[holder, controller], ttl)

    @precondition(lambda self: self.wallet)
    @rule(target=issued, data=st.data(), ttl=renew_ttls)
    def resume(self, data: st.DataObject, ttl: int | None) -> object:
        holder, controller = data.draw(st.sampled_from(sorted(self.wallet)), label="wallet")
        cred = self.fenced("resume", holder, controller, self.wallet[holder, controller], ttl)
        return (holder, cred) if cred else multiple()

    @precondition(lambda self: self.wallet)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        holder, controller = data.draw(st.sampled_from(sorted(self.wallet)), label="wallet")
        self.fenced("release", holder, controller, self.wallet[holder, controller])

    @rule(holder=st.sampled_from(HOLDERS), controller=st.sampled_from(CONTROLLERS))
    def look(self, holder: str, controller: str) -> None:
        try:
            views = self.service.controller.leases(ListLeasesInput(controller))
        except NotFoundError as exc:
            assert exc.code == "controller_unknown"
            assert self.model[controller].state == "absent"
            return
        assert len(views) == 1
        self.check_view(views[0], controller)
        self.seen[holder, controller] = views[0].data["lease_id"]

    @precondition(lambda self: self.seen)
    @rule(target=issued, data=st.data(), ttl=ttls)
    def takeover(self, data: st.DataObject, ttl: int) -> object:
        holder, controller = data.draw(st.sampled_from(sorted(self.seen)), label="seen")
        return self.take_over(holder, controller, ttl)

    @precondition(lambda self: self.seen)
    @rule(target=issued, data=st.data(), ttl=ttls)
    def wait_then_take_over(self, data: st.DataObject, ttl: int) -> object:
        """A holder that saw a lease waits until the listing says it expired, then claims it."""
        holder, controller = data.draw(st.sampled_from(sorted(self.seen)), label="seen")
        expires_at = self.model[controller].expires_at
        if self.model[controller].state == "active" and expires_at is not None:
            self.clock.now = max(self.clock.now, expires_at)
            view = self.service.controller.leases(ListLeasesInput(controller))[0]
            assert view.expired
        return self.take_over(holder, controller, ttl)

    def take_over(self, holder: str, controller: str, ttl: int) -> object:
        expected_lease_id = self.seen[holder, controller]
        lease = self.model[controller]
        if lease.state == "released":
            expected: str | None = "lease_not_held"
        elif not self.expired(controller):
            expected = "lease_not_expired"
        elif expected_lease_id != lease.lease_id:
            expected = "lease_mismatch"
        else:
            expected = None
        try:
            grant = self.service.controller.takeover(TakeoverInput(controller, expected_lease_id, ttl, holder))
        except RefusedError as exc:
            assert exc.code == expected, f"takeover: expected {expected}, got {exc.code}: {exc.message}"
            event(f"takeover: {exc.code}")
            return multiple()
        event("takeover: ok")
        assert expected is None, f"takeover succeeded where the model expected {expected}"
        return (holder, self.record_grant(grant, controller, holder, "takeover", ttl))

    @rule(seconds=st.integers(0, 2000))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: any(m.state == "active" for m in self.model.values()))
    @rule(controller=st.sampled_from(CONTROLLERS), offset=st.sampled_from([-1, 0, 1]))
    def advance_to_expiry(self, controller: str, offset: int) -> None:
        """Land on the expiry boundary itself (expired means expires_at <= now)."""
        expires_at = self.model[controller].expires_at
        if expires_at is not None:
            target = expires_at + timedelta(microseconds=offset)
            self.clock.now = max(self.clock.now, target)

    # --- rules: deliberately stale or forged credentials ----------------------------------------

    @rule(target=issued, entry=issued, op=st.sampled_from(FENCED_OPS))
    def replay_old_credential(self, entry: tuple[str, Credential], op: str) -> object:
        """A credential from before a resume, takeover or release; it may happen to still be current."""
        holder, cred = entry
        renewed = self.fenced(op, holder, cred.controller_id, cred)
        return (holder, renewed) if renewed else multiple()

    @rule(entry=issued, op=st.sampled_from(FENCED_OPS), data=st.data())
    def forged_token(self, entry: tuple[str, Credential], op: str, data: st.DataObject) -> None:
        holder, cred = entry
        lease = self.model[cred.controller_id]
        base = replace(cred, lease_id=lease.lease_id or cred.lease_id, generation=lease.generation)
        how = data.draw(st.sampled_from(["fresh", "flipped", "empty", "hash"]), label="forgery")
        if how == "fresh":
            token = fence.new_token()
        elif how == "flipped":
            token = cred.token[:-1] + ("0" if cred.token[-1] != "0" else "1")
        elif how == "empty":
            token = ""
        else:
            token = fence.hash_token(lease.token or cred.token)  # what a stolen copy of the database holds
        forged = replace(base, token=token)
        assert not self.is_current(cred.controller_id, forged)
        # A token's hash is stored by design, so it is not itself a secret the store must never hold.
        self.fenced(op, holder, cred.controller_id, forged, forged_hash=how == "hash")

    @rule(entry=issued, op=st.sampled_from(FENCED_OPS), delta=st.sampled_from([-2, -1, 1, 2]))
    def wrong_generation(self, entry: tuple[str, Credential], op: str, delta: int) -> None:
        holder, cred = entry
        lease = self.model[cred.controller_id]
        # The current lease id and token if there are any, so only the generation is wrong.
        forged = replace(
            cred,
            lease_id=lease.lease_id or cred.lease_id,
            generation=lease.generation + delta,
            token=lease.token or cred.token,
        )
        self.fenced(op, holder, cred.controller_id, forged)

    @rule(controller=st.sampled_from(CONTROLLERS), op=st.sampled_from(FENCED_OPS))
    def unknown_lease_id(self, controller: str, op: str) -> None:
        lease = self.model[controller]
        forged = Credential(controller, str(uuid.uuid4()), lease.generation, lease.token or fence.new_token())
        self.fenced(op, HOLDERS[0], controller, forged)

    # --- invariants -----------------------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        for controller, lease in self.model.items():
            instance = self.store.get(fence.instance_id(controller))
            if lease.state == "absent":
                assert instance is None
                continue
            assert instance is not None
            assert (instance.state, instance.version) == (lease.state, lease.version)
            assert instance.data["generation"] == lease.generation
            # At most one issued token opens the lease, and it is the model's current one.
            stored = instance.data.get("token_sha256")
            opening = {t for t in self.secrets if fence.hash_token(t) == stored}
            assert opening == ({lease.token} if lease.token else set())
        # One listing row per controller id ever granted, agreeing with the model.
        views = self.service.controller.leases(ListLeasesInput(include_ended=True))
        assert [v.controller_id for v in views] == [c for c in CONTROLLERS if self.model[c].state != "absent"]
        for view in views:
            self.check_view(view, view.controller_id)

    @invariant()
    def event_log_is_ordered_complete_and_secret_free(self) -> None:
        events = self.service.events(EventsInput())
        seqs = [e.seq for e in events]
        assert seqs == sorted(set(seqs)), "event seq is not strictly increasing"
        assert seqs[-1:] == ([self.last_seq] if events else []), "a refused call wrote an event"
        assert len(events) == sum(lease.version for lease in self.model.values())
        for controller, lease in self.model.items():
            mine = [e for e in events if e.instance_id == fence.instance_id(controller)]
            assert [e.version for e in mine] == list(range(1, lease.version + 1))
            grants = [e.payload["changed"]["generation"] for e in mine if e.trigger in GRANTS]
            assert grants == list(range(1, lease.generation + 1)), "generations did not grow by one per grant"
        text = json.dumps([e.to_dict() for e in events])
        for token in self.secrets:
            assert token not in text, "a fence token appears in the event log"
            assert fence.hash_token(token) not in text, "a fence token's hash appears in the event log"


ControllerLeases.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestControllerLeases = ControllerLeases.TestCase


def _service(tmp_path: Path) -> tuple[Service, ManualClock]:
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "corral.db", clock=clock)
    return Service(store, shared_library(), actor="test"), clock


@pytest.mark.parametrize("op", ["renew", "resume"])
def test_renew_or_resume_of_released_lease_is_fence_stale(tmp_path: Path, op: str) -> None:
    """A released lease's credential is stale for every fenced trigger, as for release itself.

    Up to commit fa616f1 renew and resume raised the engine's ``transition_not_allowed`` here instead.
    """
    service, _ = _service(tmp_path)
    try:
        cred = service.controller.acquire(AcquireInput("ctl", "TICKET-1", SHA, 60, "h@host")).credential
        service.controller.release(ReleaseInput("ctl", cred, "commit 1234", CHECKPOINT_SHA))
        with pytest.raises(RefusedError) as caught:
            if op == "renew":
                service.controller.renew(RenewInput("ctl", cred))
            else:
                service.controller.resume(ResumeInput("ctl", cred))
        assert caught.value.code == "fence_stale", f"got {caught.value.code}: {caught.value.message}"
        assert [e.trigger for e in service.events(EventsInput())] == ["acquire", "release"]
    finally:
        service.store.close()


def test_each_refusal_code_is_reachable(tmp_path: Path) -> None:
    """One scripted history that meets every refusal code the machine above predicts."""
    service, clock = _service(tmp_path)
    codes: list[str] = []

    def attempt(call: Callable[[], object]) -> None:
        try:
            call()
        except CorralError as exc:
            codes.append(exc.code)

    try:
        attempt(lambda: service.controller.renew(RenewInput("ctl", Credential("ctl", str(uuid.uuid4()), 1, "x"))))
        a = service.controller.acquire(AcquireInput("ctl", "TICKET-1", SHA, 60, "a@host")).credential
        attempt(lambda: service.controller.acquire(AcquireInput("ctl", "TICKET-1", SHA, 60, "b@host")))
        attempt(lambda: service.controller.takeover(TakeoverInput("ctl", a.lease_id, 60, "b@host")))
        clock.advance(60)
        attempt(lambda: service.controller.renew(RenewInput("ctl", a)))
        attempt(lambda: service.controller.takeover(TakeoverInput("ctl", str(uuid.uuid4()), 60, "b@host")))
        b = service.controller.takeover(TakeoverInput("ctl", a.lease_id, 60, "b@host")).credential
        attempt(lambda: service.controller.resume(ResumeInput("ctl", a)))
        service.controller.release(ReleaseInput("ctl", b, "commit 1234", CHECKPOINT_SHA))
        attempt(lambda: service.controller.takeover(TakeoverInput("ctl", b.lease_id, 60, "a@host")))
        assert codes == [
            "controller_unknown",
            "lease_held",
            "lease_not_expired",
            "lease_expired",
            "lease_mismatch",
            "fence_stale",
            "lease_not_held",
        ]
        assert b.generation == a.generation + 1
    finally:
        service.store.close()

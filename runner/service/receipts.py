"""Handoff receipts: relay a prompt to a leased agent with a receipt, collect its result at the
cursor it settled at, ask (relay then collect), batches, abandon, and receipt reads.

Every operation that acts takes the controller's credential: its public parts go into the request's
params (and the event log), the token into its secrets. Before each transition the service observes
the world afresh (the agent's identity, status and cursor; its output and a second observation when
output is captured) and hands those observations to the machine's guards; it never decides a rule
itself. Relays are synchronous; collects (and the asks that end in one) wait, and are async: their
store reads, transitions and synchronous host calls run on a worker thread
(:func:`~runner.service.core.in_thread`).
"""

from __future__ import annotations

import uuid
from typing import Any

from runner.agents.abc import GONE, AgentGoneError, AgentHost, WaitTimeoutError
from runner.context import Instance
from runner.engine import Request, Result
from runner.errors import (
    AgentRunFailedError,
    AgentSessionLostError,
    AuthorityMovedError,
    ConflictError,
    CorralError,
    OutcomeUnrecordedError,
    RefusedError,
)
from runner.guards.agents import OPEN_RECEIPT_STATES, same_identity
from runner.service.checks import CAPTURE_LINES_DEFAULT, TIMEOUT_DEFAULT, TOKEN_PREFIX
from runner.service.core import Core, in_thread, sha256
from runner.service.inputs.receipts import AbandonInput, AskManyInput, CollectInput, ReceiptsInput, RelayInput
from runner.service.views.pages import Page
from runner.service.views.receipts import AskManyResult, CollectResult, ReceiptView
from runner.service.waits import Waits


class DeliveryError(ConflictError):
    """The prompt was not confirmed delivered (``delivery_ambiguous``: the receipt stays reserved and
    blocks the target until abandoned; ``delivery_failed``: it certainly was not, the receipt failed).
    Observe the agent, then abandon the receipt on fresh evidence or ask again."""

    default_code = "delivery_ambiguous"


class Receipts:
    """Relays, collects, asks and receipt reads; ``waits`` gives the first-settled wait of a batch."""

    def __init__(self, core: Core, waits: Waits) -> None:
        self.core = core
        self.waits = waits

    def __call__(self, inp: ReceiptsInput) -> Page[ReceiptView]:
        """``service.receipts(inp)``: :meth:`find` (the listing's spelling before receipts were a component)."""
        return self.find(inp)

    # --- reads -------------------------------------------------------------------------------------------

    def receipt(self, token: str) -> ReceiptView:
        """The receipt with this token.

        Raises:
            NotFoundError: ``receipt_unknown``.
        """
        return self.core.receipt_view(self.core.receipt_instance(token))

    def receipt_by_id(self, receipt_id: str) -> ReceiptView | None:
        """The receipt whose id (the part after ``receipt/``) is ``receipt_id``, or None."""
        found = self.core.store.get(f"receipt/{receipt_id}")
        return None if found is None else self.core.receipt_view(found)

    def find(self, inp: ReceiptsInput) -> Page[ReceiptView]:
        """Receipts (of one controller, in some states; open ones unless ``include_ended``), oldest
        reservation first; a page of ``inp.limit`` after the receipt id ``inp.after`` (pages follow
        receipt ids; each is sorted by reservation)."""
        states = inp.states or (None if inp.include_ended else OPEN_RECEIPT_STATES)
        controller = inp.controller_id
        keep = None if controller is None else (lambda r: r.data.get("controller_id") == controller)
        after = None if inp.after is None else f"receipt/{inp.after}"
        found, more = self.core.page("receipt", states, after=after, limit=inp.limit, keep=keep)
        views = sorted((self.core.receipt_view(r) for r in found), key=lambda v: str(v.data.get("reserved_at")))
        return Page(views, found[-1].id.partition("/")[2] if more else None)

    # --- relay -------------------------------------------------------------------------------------------

    def relay(self, inp: RelayInput) -> ReceiptView:
        """Reserve a receipt and deliver the prompt; returns it pending.

        Raises:
            RefusedError: ``receipt_outstanding``, ``agent_not_settled``, ``fence_stale``… (nothing sent).
            DeliveryError: ``delivery_ambiguous`` (still reserved, blocking) or ``delivery_failed``.
        """
        receipt_id, request = self._relay_request(inp)
        try:
            result: Result | CorralError = self.core.engine.fire(self.core.library.builtin("receipt"), request)
        except (AuthorityMovedError, OutcomeUnrecordedError) as exc:
            result = exc
        return self._delivered(inp.target, receipt_id, result)

    def _relay_request(self, inp: RelayInput) -> tuple[str, Request]:
        lease = self.core.lease_by_name(inp.controller_id, inp.target)
        host = self.core.host(lease.data["host"])
        receipt_id = inp.receipt_id or str(uuid.uuid4())
        token = f"{TOKEN_PREFIX}{receipt_id}"
        return receipt_id, self.core.request(
            f"receipt/{receipt_id}",
            "relay",
            inp.credential,
            {
                "target": lease.id,
                "token": token,
                "prompt_sha256": sha256(inp.text),
                "batch_id": inp.batch_id,
                **({"schema_sha256": sha256(inp.schema)} if inp.schema is not None else {}),
            },
            {"agent": self.core.observe(host, lease.data.get("pane_id"))},
            secrets={"prompt": inp.text, **({"schema": inp.schema} if inp.schema is not None else {})},
            host=host,
        )

    def _delivered(self, target: str, receipt_id: str, result: Result | CorralError) -> ReceiptView:
        """The pending receipt of a relay, or the error that says what happened to its prompt."""
        token = f"{TOKEN_PREFIX}{receipt_id}"
        if isinstance(result, AuthorityMovedError):
            # The gate refused before the hand-over: certainly not delivered (say so, with the receipt).
            result.details["delivered"] = False
            self._attach_receipt(result, receipt_id)
            raise result
        if isinstance(result, OutcomeUnrecordedError):
            result.details["delivered"] = result.details.get("effect_outcome") == "success" or None
            self._attach_receipt(result, receipt_id)
            raise result
        if isinstance(result, CorralError):
            raise result
        view = self.core.receipt_view(result.instance)
        if result.outcome == "success":
            return view
        if result.outcome == "failure":
            raise DeliveryError(
                f"receipt {token}: {view.data.get('message')}", code="delivery_failed", receipt=view.to_dict()
            )
        raise DeliveryError(
            f"receipt {token} stays reserved and blocks {target!r}: {view.data.get('message')}; observe the "
            "agent and abandon the receipt on fresh evidence",
            code="delivery_ambiguous",
            receipt=view.to_dict(),
        )

    def _attach_receipt(self, exc: CorralError, receipt_id: str) -> None:
        found = self.core.store.get(f"receipt/{receipt_id}")
        if found is not None:
            exc.details["receipt"] = self.core.receipt_view(found).to_dict()

    # --- collect -----------------------------------------------------------------------------------------

    def _collect_start(
        self, inp: CollectInput, token: str
    ) -> tuple[Instance, AgentHost, CollectResult | None, dict[str, Any] | None]:
        """A receipt judged before its wait: the owner checked; a completed one replayed; one that is
        neither completed nor pending refused; and, for a pending one, the observation of its pane if it
        no longer holds the receipt's agent (then there is nothing to wait for)."""
        receipt = self.core.receipt_instance(token)
        if receipt.data.get("controller_id") != inp.controller_id:
            raise RefusedError(
                f"receipt {token} belongs to controller {receipt.data.get('controller_id')!r}",
                code="not_owner",
                receipt=token,
            )
        host = self.core.host(receipt.data["host"])
        if receipt.state == "completed":
            return receipt, host, self._replay(receipt, host, inp.lines), None
        if receipt.state != "pending":
            view = self.core.receipt_view(receipt)
            code = "receipt_reserved" if receipt.state == "reserved" else "receipt_ended"
            raise RefusedError(
                f"receipt {token} is {receipt.state}"
                + (f" ({receipt.data.get('reason')})" if receipt.data.get("reason") else "")
                + (
                    "; its delivery was never confirmed: abandon it on fresh evidence"
                    if receipt.state == "reserved"
                    else ""
                ),
                code=code,
                receipt=view.to_dict(),
            )
        return receipt, host, None, self._not_the_receipts(host, receipt)

    def _collect_finish(
        self, inp: CollectInput, receipt: Instance, host: AgentHost, settled: dict[str, Any]
    ) -> CollectResult:
        """Capture the output at the settled cursor and record the collect; refused unless it completed."""
        before, output, after = self.core.capture(host, receipt.data["pane_id"], inp.lines, settled)
        observations: dict[str, Any] = {"agent": before, "agent_after": after, "capture_sha256": sha256(output)}
        run = self._run_of(host, receipt, before)
        if run is not None:
            observations["run"] = run
        result = self.core.fire_on("receipt", receipt.id, "collect", inp.credential, {}, observations)
        view = self.core.receipt_view(result.instance)
        if result.instance.state != "completed":
            raise RefusedError(
                f"receipt {receipt.data['token']} failed: {view.data.get('reason')}",
                code=str(view.data.get("reason")),
                receipt=view.to_dict(),
            )
        collected = CollectResult(view, output)
        self._check_run(collected)
        return collected

    async def _collect_one(self, inp: CollectInput, token: str) -> CollectResult:
        receipt, host, replayed, settled = await in_thread(self._collect_start, inp, token)
        if replayed is not None:
            return replayed
        try:
            if settled is None:
                settled = (
                    await host.wait(receipt.data["pane_id"], int(receipt.data["after_seq"]), inp.timeout)
                ).to_dict()
        except AgentGoneError:
            settled = dict(GONE)
        except WaitTimeoutError as exc:
            name = receipt.data.get("name")
            raise WaitTimeoutError(
                f"{name!r} did not settle within {inp.timeout:g} s (now {exc.details.get('status')} at seq "
                f"{exc.details.get('seq')}); the receipt stays pending: collect it again later, or abandon it",
                **{**exc.details, "target": name, "receipt": self.core.receipt_view(receipt).to_dict()},
            ) from None
        return await in_thread(self._collect_finish, inp, receipt, host, settled)

    def _not_the_receipts(self, host: AgentHost, receipt: Instance) -> dict[str, Any] | None:
        """The observation of the receipt's pane if it no longer holds the receipt's agent (gone, or
        another agent: after a Herdr restart the pane has another terminal and the agent no name),
        else None. Such a receipt can only fail (``identity_changed``), so collect must not wait on it:
        its cursor belongs to the old lifetime (Herdr's counter restarts from 0), and a wait for a seq
        past it would run out the whole timeout instead."""
        observed = self.core.observe(host, receipt.data.get("pane_id"))
        return None if same_identity(observed, receipt.data) else observed

    @staticmethod
    def _run_of(host: AgentHost, receipt: Instance, settled: dict[str, Any]) -> dict[str, Any] | None:
        """The structured result of the run the receipt's prompt started (its driver's reading), when
        the host keeps one and the agent sits at the receipt's settled cursor."""
        reader = getattr(host, "run_result", None)
        if reader is None or not settled.get("exists"):
            return None
        try:
            found = reader(receipt.data["pane_id"])
        except AgentGoneError:
            return None
        return found if isinstance(found, dict) else None

    @staticmethod
    def _check_run(collected: CollectResult) -> None:
        """A run that exited non-zero, or whose CLI said it failed, is a failure, not a finished review
        (its output says why); a conversation that could not be resumed says so."""
        data = collected.receipt.data
        if data.get("run_error") is not None and collected.receipt.state == "completed":
            name = data.get("name")
            error_class = AgentSessionLostError if data.get("session_lost") else AgentRunFailedError
            lost = data.get("session_lost")
            raise error_class(
                f"the agent {name!r}'s run failed: {data.get('run_error')}"
                + (
                    "; its conversation cannot be resumed: close the lease and start a new one"
                    if lost
                    else "; its output is in details"
                ),
                receipt=collected.receipt.to_dict(),
                output=collected.output,
                exit_status=data.get("exit_status"),
                agent_error=data.get("run_error"),
            )
        status = collected.receipt.data.get("exit_status")
        blocked = collected.receipt.data.get("settled_status") == "blocked"  # a question, not a failure
        if status not in (None, 0) and not blocked and collected.receipt.state == "completed":
            name = collected.receipt.data.get("name")
            raise AgentRunFailedError(
                f"the agent {name!r}'s run failed with exit status {status}"
                + (" (its command was not found)" if status == 127 else "")
                + "; its output is in details",
                receipt=collected.receipt.to_dict(),
                output=collected.output,
                exit_status=status,
            )

    def _replay(self, receipt: Instance, host: AgentHost, lines: int) -> CollectResult:
        """A completed receipt's output, only while the agent still sits at the settled cursor."""
        pane_id = receipt.data["pane_id"]
        before, output, after = self.core.capture(host, pane_id, lines)
        stable = (
            before == after
            and same_identity(before, receipt.data)
            and before.get("seq") == receipt.data.get("settled_seq")
        )
        if not stable or sha256(output) != receipt.data.get("output_sha256"):
            why = (
                f"the agent {receipt.data.get('name')!r} is gone (its pane was closed)"
                if not before.get("exists")
                else f"the agent has moved on (seq {before.get('seq')}) or its output changed"
            )
            raise RefusedError(
                f"receipt {receipt.data['token']} completed at seq {receipt.data.get('settled_seq')}, but {why}: the "
                "result can no longer be replayed",
                code="cursor_superseded",
                receipt=self.core.receipt_view(receipt).to_dict(),
            )
        replayed = CollectResult(self.core.receipt_view(receipt), output, replayed=True)
        self._check_run(replayed)
        return replayed

    async def collect(self, inp: CollectInput) -> list[CollectResult]:
        """Collect each receipt (concurrently); the first error is raised after all have finished.

        The fence is checked first: a replay changes nothing, but its output is still only for the
        controller's current holder.
        """
        import anyio

        await in_thread(self.core.check_fence, inp.credential)
        results: dict[str, CollectResult] = {}
        errors: dict[str, CorralError] = {}

        async def one(token: str) -> None:
            try:
                results[token] = await self._collect_one(inp, token)
            except CorralError as exc:
                errors[token] = exc

        async with anyio.create_task_group() as group:
            for token in inp.tokens:
                group.start_soon(one, token)
        if errors:
            token, error = next((t, errors[t]) for t in inp.tokens if t in errors)
            error.details.setdefault("receipt_token", token)
            if results:
                error.details["collected"] = [results[t].to_dict() for t in inp.tokens if t in results]
            raise error
        return [results[t] for t in inp.tokens]

    def _first_ready(self, inp: CollectInput) -> tuple[list[Instance], str | None]:
        """The fence checked, the receipts, and one that wins without a wait: a completed receipt (it
        replays), or a pending one whose agent is already not its own (collect fails it,
        ``identity_changed``, as a vanished agent does: its old-lifetime cursor would never be passed)."""
        self.core.check_fence(inp.credential)
        receipts = [self.core.receipt_instance(token) for token in inp.tokens]
        winner = next((str(r.data["token"]) for r in receipts if r.state == "completed"), None)
        if winner is None:
            winner = next(
                (
                    str(r.data["token"])
                    for r in receipts
                    if r.state == "pending"
                    and self._not_the_receipts(self.core.host(str(r.data["host"])), r) is not None
                ),
                None,
            )
        return receipts, winner

    def _entries(self, receipts: list[Instance]) -> list[tuple[str, AgentHost, str, int]]:
        return [
            (
                str(r.data["token"]),
                self.core.host(str(r.data["host"])),
                str(r.data["pane_id"]),
                int(r.data["after_seq"]),
            )
            for r in receipts
        ]

    def _pending(self, tokens: tuple[str, ...], winner: str) -> list[ReceiptView]:
        return [self.receipt(t) for t in tokens if t != winner]

    async def collect_first(self, inp: CollectInput) -> AskManyResult:
        """The first of the receipts to settle, collected; the others returned still pending (they keep
        blocking their targets until collected or abandoned). A completed receipt wins at once (replay)."""
        receipts, winner = await in_thread(self._first_ready, inp)
        if winner is None:
            for receipt in receipts:
                if receipt.state != "pending":
                    await self._collect_one(inp, str(receipt.data["token"]))  # raises what collect would
            entries = await in_thread(self._entries, receipts)
            winner = await self.waits.first_settled(entries, inp.timeout)
        (result,) = await self.collect(
            CollectInput(inp.controller_id, inp.credential, (winner,), inp.timeout, inp.lines)
        )
        pending = await in_thread(self._pending, inp.tokens, winner)
        return AskManyResult([result], pending)

    # --- ask, batches, abandon ---------------------------------------------------------------------------

    async def ask(
        self, relay: RelayInput, timeout: float = TIMEOUT_DEFAULT, lines: int = CAPTURE_LINES_DEFAULT
    ) -> CollectResult:
        """Relay, then collect the one receipt."""
        receipt = await in_thread(self.relay, relay)
        collected = await self.collect(
            CollectInput(relay.controller_id, relay.credential, (receipt.token,), timeout, lines)
        )
        return collected[0]

    def relay_many(self, inp: AskManyInput) -> list[ReceiptView]:
        """Admit every request of a batch at once, then deliver each.

        Invariant: admission is all or nothing: every target (one active lease of this controller, no
        unresolved receipt, settled, identity) is judged and every receipt reserved in **one** store
        transaction before any prompt is delivered, so a refusal leaves nothing reserved and nothing
        delivered. A delivery that then fails is reported with every receipt of the batch.
        """
        batch_id = inp.batch_id or str(uuid.uuid4())
        keys: tuple[str | None, ...] = inp.receipt_ids or tuple(None for _ in inp.requests)
        built = [
            self._relay_request(RelayInput(inp.controller_id, inp.credential, target, text, batch_id, key))
            for (target, text), key in zip(inp.requests, keys, strict=True)
        ]
        results = self.core.engine.fire_many(self.core.library.builtin("receipt"), [request for _, request in built])
        receipts: list[ReceiptView] = []
        failure: CorralError | None = None
        for (target, _), (receipt_id, _), result in zip(inp.requests, built, results, strict=True):
            try:
                receipts.append(self._delivered(target, receipt_id, result))
            except CorralError as exc:
                failure = failure or exc
                found = self.core.store.get(f"receipt/{receipt_id}")
                if found is not None:
                    receipts.append(self.core.receipt_view(found))
        if failure is not None:
            failure.details["batch_id"] = batch_id
            failure.details["batch"] = [r.to_dict() for r in receipts]
            raise failure
        return receipts

    async def ask_many(self, inp: AskManyInput) -> AskManyResult:
        """Relay to every target (admitted all at once), then collect all, or the first to settle with the
        rest left pending."""
        receipts = await in_thread(self.relay_many, inp)
        tokens = tuple(r.token for r in receipts)
        if inp.mode == "all":
            return AskManyResult(
                await self.collect(CollectInput(inp.controller_id, inp.credential, tokens, inp.timeout, inp.lines)), []
            )
        return await self.collect_first(
            CollectInput(inp.controller_id, inp.credential, tokens, inp.timeout, inp.lines, "first")
        )

    def abandon(self, inp: AbandonInput) -> ReceiptView:
        """Abandon a reserved or pending receipt on a fresh observation that its agent is settled."""
        receipt = self.core.receipt_instance(inp.token)
        host = self.core.host(receipt.data["host"])
        result = self.core.fire_on(
            "receipt",
            receipt.id,
            "abandon",
            inp.credential,
            {"message": inp.message},
            {"agent": self.core.observe(host, receipt.data.get("pane_id"))},
        )
        return self.core.receipt_view(result.instance)

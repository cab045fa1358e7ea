"""The receipts' inputs: relay, collect, ask many, abandon, list."""

from __future__ import annotations

from runner.errors import InputError
from runner.service.checks import (
    BATCH_MAX,
    CAPTURE_LINES_DEFAULT,
    RECEIPT_STATES,
    TIMEOUT_DEFAULT,
    check_controller_id,
    check_key,
    check_lines,
    check_message,
    check_mode,
    check_name,
    check_text,
    check_timeout,
    check_token,
)
from runner.service.inputs.base import FencedInput, check_page
from runner.service.inputs.fields import described, input_class

SCHEMA_MAX = 64 * 1024


def check_verdict_schema(text: str) -> str:
    """A verdict schema: JSON text of at most 64 KiB holding a valid JSON Schema object (checked against
    its metaschema); returned in a canonical compact form."""
    import json

    if not isinstance(text, str) or len(text.encode("utf-8")) > SCHEMA_MAX:
        raise InputError("schema", f"the schema must be JSON text of at most {SCHEMA_MAX} bytes")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InputError("schema", f"the schema is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InputError("schema", "the schema must be a JSON object (a JSON Schema)")
    import jsonschema

    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(the schema)"
        raise InputError("schema", f"not a valid JSON Schema at {where}: {exc.message}") from None
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@input_class
class RelayInput(FencedInput):
    """Hand ``text`` to the leased agent ``target`` with a receipt."""

    target: str = described("target", "The leased agent's name.")
    text: str = described("text", "The prompt text (data for the agent; at most 1,000,000 characters).", repr=False)
    batch_id: str | None = None
    receipt_id: str | None = None
    """An idempotency key: the receipt is ``receipt/<receipt_id>`` (plans derive it from the step)."""
    schema: str | None = None
    """A JSON Schema (as JSON text) the agent's final answer must match: a structured verdict."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("target", self.target)
        check_text(self.text)
        check_key("receipt_id", self.receipt_id)
        if self.schema is not None:
            object.__setattr__(self, "schema", check_verdict_schema(self.schema))


@input_class
class CollectInput(FencedInput):
    """Collect the results of receipts, waiting up to ``timeout`` seconds for each."""

    tokens: tuple[str, ...] = described("receipts", "The receipt tokens (from corral_relay).")
    timeout: float = described("timeout", "How long to wait, in seconds (at most 86400).", default=TIMEOUT_DEFAULT)
    lines: int = described(
        "lines", "How many lines of the agent's visible output to capture.", default=CAPTURE_LINES_DEFAULT
    )
    mode: str = described(
        "mode",
        "all: wait for every one; first: return the first to settle, the others stay pending (collect them later).",
        default="all",
        schema={"type": "string", "enum": ["all", "first"]},
    )
    """``all``: every result; ``first``: the first receipt to settle, the others left pending."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= len(self.tokens) <= BATCH_MAX:
            raise InputError("receipt", f"give 1-{BATCH_MAX} receipt tokens, not {len(self.tokens)}")
        check_mode(self.mode)
        for token in self.tokens:
            check_token(token)
        if len(set(self.tokens)) != len(self.tokens):
            raise InputError("receipt", "a receipt token is given twice")
        check_timeout(self.timeout)
        check_lines(self.lines)


@input_class
class AskManyInput(FencedInput):
    """Relay to 1-8 distinct targets, then collect all, or the first to settle (mode ``first``)."""

    requests: tuple[tuple[str, str], ...] = described(
        "requests",
        "One {target, text} per agent.",
        repr=False,
        schema={
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"target": {"type": "string"}, "text": {"type": "string"}},
                "required": ["target", "text"],
                "additionalProperties": False,
            },
        },
    )
    mode: str = described(
        "mode",
        "all: wait for every one; first: return the first to settle, the others stay pending (collect them later).",
        default="all",
        schema={"type": "string", "enum": ["all", "first"]},
    )
    timeout: float = described("timeout", "How long to wait, in seconds (at most 86400).", default=TIMEOUT_DEFAULT)
    lines: int = described(
        "lines", "How many lines of the agent's visible output to capture.", default=CAPTURE_LINES_DEFAULT
    )
    batch_id: str | None = None
    """An idempotency key for the batch (plans derive it from the step); a fresh UUID otherwise."""
    receipt_ids: tuple[str, ...] | None = None
    """Idempotency keys for the receipts, one per request (``receipt/<id>``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key("batch_id", self.batch_id)
        if self.receipt_ids is not None:
            if len(self.receipt_ids) != len(self.requests):
                raise InputError("receipt_ids", "give one receipt id per request")
            for key in self.receipt_ids:
                check_key("receipt_ids", key)
        if not 1 <= len(self.requests) <= BATCH_MAX:
            raise InputError("request", f"give 1-{BATCH_MAX} requests, not {len(self.requests)}")
        targets = [target for target, _ in self.requests]
        if len(set(targets)) != len(targets):
            raise InputError("request", "each target may appear once in a batch")
        for target, text in self.requests:
            check_name("request", target)
            check_text(text, "request")
        check_mode(self.mode)
        check_timeout(self.timeout)
        check_lines(self.lines)


@input_class
class AbandonInput(FencedInput):
    """Release a reserved or pending receipt's target on fresh evidence that the agent is settled."""

    token: str = described("receipt", "The receipt token.")
    message: str | None = described("message", "Why, recorded with the receipt.", default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_token(self.token)
        check_message("message", self.message)


@input_class
class ReceiptsInput:
    """Receipts (of one controller, in some states), newest last.

    Without ``states``, open ones (reserved, pending) only unless ``include_ended``. ``after`` (a
    receipt id: the previous page's ``next_after``) and ``limit`` page through them in receipt id
    order; each page is sorted oldest reservation first.
    """

    controller_id: str | None = described("controller", "Only this controller's.", default=None)
    states: tuple[str, ...] = described(
        "state",
        "Only these states (excludes all).",
        default=(),
        schema={
            "type": "array",
            "items": {"type": "string", "enum": ["reserved", "pending", "completed", "failed", "abandoned"]},
        },
    )
    include_ended: bool = described(
        "all", "Include ended ones too (released, closed, settled, finished).", default=False
    )
    after: str | None = described("after", "Start after this key: the previous page's next_after.", default=None)
    limit: int | None = described(
        "limit", "At most this many rows (1-10000); the reply's next_after starts the next page.", default=None
    )

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)
        check_page(self.after, self.limit)
        for state in self.states:
            if state not in RECEIPT_STATES:
                raise InputError("state", f"{state!r} is not a receipt state ({', '.join(RECEIPT_STATES)})")

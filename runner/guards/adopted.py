"""Guards of adopted leases (machine ``adopted``): which panes may never be adopted or closed.

The service reads the protected panes afresh for every request and passes them as the observation
``protected_panes`` (a list of pane ids): the coordinator's own pane (``$HERDR_PANE_ID`` on the Herdr
host) and the configured ones (``$CORRAL_PROTECTED_PANES``). The other rules of an adoption reuse
the agent guards (:mod:`runner.guards.agents`): the exact agent seen, at its cursor, in a pane no
live lease holds.
"""

from __future__ import annotations

from runner.context import Context, Rejection
from runner.guards import GUARDS


@GUARDS.register("pane_not_protected")
def pane_not_protected(ctx: Context) -> Rejection | None:
    """The pane is not protected: a coordinator never adopts (or closes through an adoption) its own pane
    or one its operator listed, whatever the caller names."""
    pane_id = ctx.params.get("pane_id") or ctx.instance.data.get("pane_id")
    protected = ctx.observations.get("protected_panes")
    if not isinstance(protected, (list, tuple)):
        # Invariant: no evidence of what is protected is never read as "nothing is".
        return Rejection("pane_protected", "the protected panes were not observed; refusing to act on any pane")
    if pane_id not in protected:
        return None
    return Rejection(
        "pane_protected",
        f"pane {pane_id!r} is protected (the coordinator's own pane, $HERDR_PANE_ID, or listed in "
        "$CORRAL_PROTECTED_PANES); corral never adopts or closes it",
        {"pane_id": pane_id},
    )

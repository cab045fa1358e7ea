"""An agent host: a factory the host registry calls with the store, a state directory and the kinds.

This one runs agents as corral's own supervised processes, kept in a directory of its own: a real
host adapter implements :class:`runner.agents.abc.AgentHost` against its terminal multiplexer.
"""

from __future__ import annotations

from runner.agents.abc import AgentHost
from runner.agents.hosts import HostContext


def open_example_host(ctx: HostContext) -> AgentHost:
    """Supervised processes under <home>/example-agents (an example plugin's host)."""
    from runner.agents.process import ProcessHost

    return ProcessHost(ctx.store, ctx.state_dir("example-agents"), ctx.kinds)

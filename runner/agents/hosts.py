"""The agent host registry: a host name (``process``, ``herdr``) maps to a factory that opens it.

A factory is ``fn(ctx: HostContext) -> AgentHost``; its docstring's first line is the summary
``corral status`` shows. Built-ins register here and import their module only when opened (the
Herdr adapter is never loaded by a command that does not use it). Other distributions add hosts
through the entry point group ``corral.agent_hosts`` (``name = "package.module:factory"``), loaded
the first time a name is not among the built-ins, exactly as guards, updates and effects are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.errors import InputError
from runner.registry import Registry

if TYPE_CHECKING:
    from runner.agents.abc import AgentHost
    from runner.agents.kinds import Kinds
    from runner.store.abc import Store


@dataclass(frozen=True)
class HostContext:
    """What a host factory may use: the store (the process host keeps its slots there), a private
    directory of its own under the state home, and the agent kinds configured on this machine."""

    store: Store
    state_dir: Callable[[str], Path]  # state_dir("agents") -> a private directory, created on demand
    kinds: Kinds


HostFactory = Callable[[HostContext], "AgentHost"]

AGENT_HOSTS: Registry[HostFactory] = Registry("agent host", "corral.agent_hosts")


@AGENT_HOSTS.register("process")
def process_host(ctx: HostContext) -> AgentHost:
    """corral's own supervised processes, one slot per agent in the store."""
    from runner.agents.process import ProcessHost

    return ProcessHost(ctx.store, ctx.state_dir("agents"), ctx.kinds)


@AGENT_HOSTS.register("herdr")
def herdr_host(ctx: HostContext) -> AgentHost:
    """Agents in Herdr panes, driven through the herdr CLI ($CORRAL_HERDR, $HERDR_BIN_PATH, herdr)."""
    from runner.agents.herdr import HerdrHost

    return HerdrHost(ctx.kinds, journal=lambda: ctx.state_dir("herdr"))


def open_host(name: str, ctx: HostContext) -> AgentHost:
    """Open the host called ``name``.

    Raises:
        InputError: ``host`` when no registered host has that name (the message lists the known ones).
    """
    entry = AGENT_HOSTS.get(name)
    if entry is None:
        raise InputError("host", f"unknown agent host {name!r} ({', '.join(AGENT_HOSTS.names())})")
    return entry.fn(ctx)


def known(name: str) -> bool:
    """Whether a host called ``name`` is registered (plugins are loaded only when it is not a built-in)."""
    return AGENT_HOSTS.get(name) is not None

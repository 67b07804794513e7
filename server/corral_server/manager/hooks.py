"""Who the manager tells of what happens to agents: set by the daemon (app.py) after both
sides exist, read at each call; None tells no one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from corral_server.domain.agent import Agent
from corral_server.domain.events import TurnTerminal


@dataclass(slots=True)
class ManagerHooks:
    # An agent settled: a turn ended and no successor follows. Told on the agent's task, so
    # it must not block (the sub-agent registry's).
    on_settled: Callable[[Agent, TurnTerminal], None] | None = None
    # Before an archive cascade closes its agents (their ids, the agent first): the
    # sub-agent registry's.
    on_archive: Callable[[list[str]], Awaitable[None]] | None = None
    # On the loop, each agent a close or an archive leaves closed: the MCP endpoint's (it
    # ends what that agent has open).
    on_closed: Callable[[str], None] | None = None

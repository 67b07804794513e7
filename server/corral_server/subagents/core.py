"""What every part of the sub-agent registry shares: the ledger (the run records and the one
queue every change to them goes through), the manager (the only way to change an agent), the
daemon's clock and the limits. The registry builds it once and hands it to each part at
construction, as an agent's actor hands its parts their ActorCore.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral_server.clock import Clock
from corral_server.manager.manager import AgentManager
from corral_server.subagents.ledger import RunLedger
from corral_server.subagents.limits import SubagentLimits


@dataclass(frozen=True, slots=True)
class RunCore:
    ledger: RunLedger
    manager: AgentManager
    clock: Clock
    limits: SubagentLimits

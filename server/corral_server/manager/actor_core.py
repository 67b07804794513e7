"""What every part of an agent's actor shares: the deps, the snapshot, the queue, the turn
book, and the timeline writer of the moment (a rewind or a rehydrating reload replaces it).
Handed to each part at construction, so no part reaches into another through the actor.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral_server.jobs import JobQueue
from corral_server.manager.actor_deps import ActorDeps
from corral_server.manager.agent_state import AgentState
from corral_server.manager.turn_book import TurnBook
from corral_server.manager.writer import TimelineWriter


@dataclass(slots=True, eq=False)
class ActorCore:
    deps: ActorDeps
    state: AgentState
    jobs: JobQueue
    turns: TurnBook
    # The timeline writer now: replaced only by the actor (`_install_writer`), on its queue.
    writer: TimelineWriter

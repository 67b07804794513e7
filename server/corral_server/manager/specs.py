"""What callers hand the manager: create, update and list requests, provider deadlines.
(CreateSpec is a plain value of domain/specs.py: a schedule keeps one as its target.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from corral_server.domain.specs import CreateSpec

__all__ = ["AgentUpdate", "CreateSpec", "ListQuery", "Timeouts"]


@dataclass(frozen=True, slots=True)
class ListQuery:
    """Which agents ListAgents answers, a page at a time in creation order: `page_size` 0 is
    the default size, `page_token` the previous page's token ("" = the first page)."""

    page_size: int = 0
    page_token: str = ""
    label_selector: str = ""
    include_archived: bool = False
    parent_agent_id: str = ""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Deadlines of provider calls and the cancel waits (docs/design.md#cancel), measured on
    the manager's clock. A provider that misses one never holds its agent's queue longer."""

    create_session_s: float = 60.0  # a real agent process starts and handshakes
    start_turn_s: float = 30.0  # until the provider names the turn (not until it ends)
    interrupt_s: float = 5.0
    settle_s: float = 10.0  # after an interrupt, for the turn to end
    close_s: float = 10.0
    # Daemon shutdown: every agent's queue drains and its session closes within this, or
    # its actor is stopped regardless.
    shutdown_s: float = 15.0


@dataclass(frozen=True, slots=True)
class AgentUpdate:
    title: str | None = None
    labels: Mapping[str, str] | None = None
    mode: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Defaults:
    """A provider's model and mode for an agent whose CreateAgent names none ("": the
    provider's own); a reloaded providers file changes them (docs/design.md#live-config)."""

    model: str = ""
    mode: str = ""

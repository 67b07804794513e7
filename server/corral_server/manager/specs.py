"""What callers hand the manager: create and update requests, cancel timeouts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from corral_server.domain.content import Prompt


@dataclass(frozen=True, slots=True)
class CreateSpec:
    provider: str
    cwd: str
    model: str = ""
    mode: str = ""
    title: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    initial_prompt: Prompt = ()
    request_id: str = ""

    def same_request(self, other: CreateSpec) -> bool:
        return (self.provider, self.cwd, self.model, self.mode, self.title, dict(self.labels)) == (
            other.provider,
            other.cwd,
            other.model,
            other.mode,
            other.title,
            dict(other.labels),
        ) and self.initial_prompt == other.initial_prompt


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Cancel waits (seed 000, section 5.4). Measured on the manager's clock."""

    interrupt_s: float = 5.0
    settle_s: float = 10.0


@dataclass(frozen=True, slots=True)
class AgentUpdate:
    title: str | None = None
    labels: Mapping[str, str] | None = None
    mode: str | None = None
    model: str | None = None

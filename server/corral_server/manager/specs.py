"""What callers hand the manager: create, update and list requests, provider deadlines."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from corral_server.domain.content import Prompt, TextPart
from corral_server.domain.workspace import WorktreeRequest


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
class CreateSpec:
    provider: str
    cwd: str
    model: str = ""
    mode: str = ""
    title: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    initial_prompt: Prompt = ()
    request_id: str = ""
    worktree: WorktreeRequest | None = None

    def fingerprint(self) -> bytes:
        """What `same_request` compares, as bytes for the durable store: a SHA-256 of the
        fields in a canonical form (images by the digest of their bytes)."""
        parts = [
            ["text", p.text]
            if isinstance(p, TextPart)
            else ["image", p.mime_type, hashlib.sha256(p.data).hexdigest()]
            for p in self.initial_prompt
        ]
        fields = [
            self.provider,
            self.cwd,
            self.model,
            self.mode,
            self.title,
            sorted(self.labels.items()),
            parts,
        ]
        if self.worktree is not None:  # appended: fingerprints stored before stay the same
            fields.append([self.worktree.branch, self.worktree.base])
        return hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode()).digest()

    def same_request(self, other: CreateSpec) -> bool:
        return (self.provider, self.cwd, self.model, self.mode, self.title, dict(self.labels)) == (
            other.provider,
            other.cwd,
            other.model,
            other.mode,
            other.title,
            dict(other.labels),
        ) and (self.initial_prompt, self.worktree) == (other.initial_prompt, other.worktree)


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

"""Requests' plain values that outlive a call: what CreateAgent asks for (`CreateSpec`, also a
schedule's target) and what a prompt does when its agent is running (`IfRunning`, also a
schedule's policy; docs/design.md#turns). The manager takes them; the store keeps a
schedule's."""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from corral_server.domain.content import Prompt, TextPart
from corral_server.domain.workspace import WorktreeRequest


class IfRunning(enum.Enum):
    REJECT = "reject"
    QUEUE = "queue"
    STEER = "steer"
    REPLACE = "replace"


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

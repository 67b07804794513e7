"""The built-in `scripted` provider: deterministic, offline agents for demos and tests
(docs/api.md, "The scripted provider").

This module owns the provider: its info (modes, a model), the validation of a prompt's script
(script_parser.py) before anything is stored, and making sessions (scripted_session.py, whose
turns scripted_turn.py plays). It starts nothing and needs no network.
"""

from __future__ import annotations

import uuid

from corral_server.clock import Clock
from corral_server.domain.content import Prompt, prompt_text
from corral_server.providers.base import (
    EventSink,
    ProviderInfo,
    ProviderMode,
    ProviderModel,
    SessionConfig,
)
from corral_server.providers.script_parser import parse_script
from corral_server.providers.scripted_session import ScriptedSession
from corral_server.providers.scripted_turn import Spawner, require_delivered

__all__ = ["ScriptedProvider", "ScriptedSession"]

# Sessions whose prompts are remembered; each keeps its last MAX_REMEMBERED_PROMPTS
# (scripted_session.py): bounded whatever a demo daemon runs.
MAX_SESSIONS = 1_000


class ScriptedProvider:
    """`can_steer`: a variant whose running turn takes steered prompts (they run after the
    turn's own steps, in the same turn); the built-in `scripted` cannot steer. Its sessions
    change model and mode live, unless made with `live_settings=False`."""

    def __init__(
        self,
        clock: Clock,
        *,
        name: str = "scripted",
        can_steer: bool = False,
        live_settings: bool = True,
    ) -> None:
        self._clock = clock
        self._name = name
        self._can_steer = can_steer
        # False: its sessions refuse a live model or mode change (docs/design.md#live-config).
        self._live_settings = live_settings
        # None: `/spawn` is refused as not delivered (no sub-agent registry).
        self.spawner: Spawner | None = None
        # Each session's prompts by session id, so a session resumed by id remembers them
        # (`/recall`), as a real agent's conversation does; in memory only, the newest
        # MAX_SESSIONS sessions.
        self._memories: dict[str, list[str]] = {}

    @property
    def name(self) -> str:
        return self._name

    def info(self) -> ProviderInfo:
        return ProviderInfo(
            name=self._name,
            kind="scripted",
            available=True,
            modes=(
                ProviderMode("default", "Default", "Runs the prompt's directives."),
                ProviderMode("plan", "Plan", "Same script; the mode is only recorded."),
            ),
            models=(ProviderModel("scripted-1", "Scripted 1"),),
            can_steer=self._can_steer,
        )

    def validate_prompt(self, prompt: Prompt) -> None:
        """Raise `InvalidArgument` for a malformed script, `Unimplemented` for a directive
        whose capability is not delivered yet."""
        require_delivered(parse_script(prompt_text(prompt)), can_spawn=self.spawner is not None)

    async def create_session(self, config: SessionConfig, sink: EventSink) -> ScriptedSession:
        session_id = config.resume_session_id
        if session_id not in self._memories:
            session_id = f"scripted-{uuid.uuid4().hex}"
            self._memories[session_id] = []
            if len(self._memories) > MAX_SESSIONS:  # oldest first: dicts keep order
                del self._memories[next(iter(self._memories))]
        return ScriptedSession(
            config,
            sink,
            self._clock,
            lambda: self.spawner,
            can_steer=self._can_steer,
            live_settings=self._live_settings,
            session_id=session_id,
            memory=self._memories[session_id],
        )

"""The `codex` provider: drives `codex app-server` (pinned in agents/, its protocol snapshot in
tests/agents/codex_schema/), one child process and one codex thread per corral session
(`codex_session.py`). An import resumes the thread in a process of its own and maps the turns
and items `thread/resume` answers (`codex_items.history_items`). It reports its modes (codex's
approval policy and sandbox), steering, and whether its command is on PATH; it must not start
anything before a session (or an import) is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from corral_server.clock import Clock, SystemClock
from corral_server.providers.base import EventSink, ForkPoint, ProviderItem, SessionConfig
from corral_server.providers.codex_items import history_items
from corral_server.providers.codex_session import MODES, CodexSession, CodexStartFailed
from corral_server.providers.command import CommandProvider, ignore_events, import_config
from corral_server.providers.mcp_servers import codex_flags, token_environment

__all__ = ["MODES", "REQUEST_TIMEOUT_S", "CodexProvider", "CodexSession", "CodexStartFailed"]

# Every request to codex waits at most this long (the manager's own deadlines are on top).
REQUEST_TIMEOUT_S = 20.0


class CodexProvider(CommandProvider):
    kind = "codex"
    modes = MODES
    can_steer = True

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        name: str = "codex",
        clock: Clock | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        super().__init__(argv, env, name=name)
        self._clock = clock or SystemClock()
        self._timeout_s = request_timeout_s

    async def create_session(self, config: SessionConfig, sink: EventSink) -> CodexSession:
        session = CodexSession(config, sink, self._clock, self._timeout_s)
        argv = [*self._argv, *codex_flags(config.mcp_servers), "app-server"]
        await session.start(argv, {**self._env, **token_environment(config.mcp_servers)})
        return session

    async def import_history(
        self, provider_session_id: str, cwd: str, daemon_tag: str
    ) -> list[ProviderItem]:
        """Thread `provider_session_id`'s turns, from `thread/resume` in a process of its own
        (closed before this returns; the agent's next turn resumes the thread again). A
        thread codex does not know is CodexStartFailed with codex's reason."""
        config = import_config(provider_session_id, cwd, daemon_tag)
        session = CodexSession(config, ignore_events, self._clock, self._timeout_s)
        await session.start([*self._argv, "app-server"], self._env)
        try:
            return history_items(session.resumed_thread)
        finally:
            await session.close()

    async def fork_session(self, point: ForkPoint, cwd: str, daemon_tag: str) -> str:
        """Codex's own fork (ForkAgent): `thread/fork` of the source's thread before the turn
        the cut's message started, in a process of its own (closed before this returns; the
        fork's first turn resumes the new thread). CodexStartFailed with codex's reason when
        codex cannot (an unknown thread or turn)."""
        config = import_config(point.session_id, cwd, daemon_tag)
        session = CodexSession(
            config, ignore_events, self._clock, self._timeout_s, fork_before_turn=point.turn_id
        )
        await session.start([*self._argv, "app-server"], self._env)
        try:
            return session.session_id
        finally:
            await session.close()

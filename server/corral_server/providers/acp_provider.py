"""The `acp` provider's front: what a daemon builds for each ACP entry at start-up (its name,
its command, whether the program is there), without the ACP SDK.

The SDK's protocol models take most of a second of CPU to import, and every daemon lists the
built-in ACP agents whether or not anyone uses them; so the session side (`acp.py`, which
loads the SDK) is imported on a worker thread when the first session or import needs it,
never on the event loop and never before the daemon serves.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from corral_server.providers.base import EventSink, ProviderItem, SessionConfig
from corral_server.providers.command import CommandProvider, ignore_events, import_config

if TYPE_CHECKING:  # for the checker only: the module loads on a worker thread, when needed
    from corral_server.providers.acp import AcpSession

SESSION_MODULE = "corral_server.providers.acp"


class AcpProvider(CommandProvider):
    kind = "acp"

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, name: str = "acp") -> None:
        super().__init__(argv, env, name=name)

    async def create_session(self, config: SessionConfig, sink: EventSink) -> AcpSession:
        await _load_session_side()
        from corral_server.providers.acp import AcpSession

        session = AcpSession(config, sink)
        await session.start(self._argv, self._env)
        return session

    async def import_history(
        self, provider_session_id: str, cwd: str, daemon_tag: str
    ) -> list[ProviderItem]:
        """What `session/load` of the session replays (`acp_history.py`), in a process of
        its own, closed before this returns. An agent without loadSession, or that does not
        know the session, is AcpStartFailed with the agent's reason."""
        await _load_session_side()
        from corral_server.providers.acp import AcpSession
        from corral_server.providers.acp_history import history_items

        config = import_config(provider_session_id, cwd, daemon_tag)
        session = AcpSession(config, ignore_events)
        session.replayed = []
        await session.start(self._argv, self._env)
        try:
            return history_items(session.replayed)
        finally:
            await session.close()


async def _load_session_side() -> None:
    """Import `acp.py` (and the SDK) on a worker thread; at once once it is loaded."""
    if SESSION_MODULE not in sys.modules:
        await asyncio.to_thread(importlib.import_module, SESSION_MODULE)

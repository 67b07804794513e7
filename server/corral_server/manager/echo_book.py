"""Echo reconciliation's memory: the running turn's prompt rows, by client_message_id and by
text, so a user message the provider echoes back is matched to the row corral stored instead
of being stored twice. Cleared at each turn start and at a rewind. On the actor's queue only.
"""

from __future__ import annotations

from corral_server.domain.timeline import UserMessage
from corral_server.manager.sanitize import sanitize_text

# The key prefix of a prompt row remembered by its text (client_message_ids never start so).
_TEXT = "\x00text:"


class EchoBook:
    def __init__(self) -> None:
        self._rows: dict[str, int] = {}  # key -> the prompt row's seq

    def clear(self) -> None:
        self._rows = {}

    def remember(self, client_message_id: str, text: str, seq: int) -> None:
        if client_message_id:
            self._rows[client_message_id] = seq
        self._rows[_TEXT + text] = seq

    def find(self, item: UserMessage) -> int | None:
        """The seq of the stored prompt `item` echoes (None: it echoes none)."""
        seq = self._rows.get(item.client_message_id) if item.client_message_id else None
        if seq is None:
            seq = self._rows.get(_TEXT + sanitize_text(item.text))
        return seq

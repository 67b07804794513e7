"""Joins streaming fragments into whole timeline rows (seed 000, section 6.2).

- empty text fragments are swallowed;
- consecutive assistant (or reasoning) fragments of one message are joined into one row;
- tool-call updates with the same call_id replace each other; a terminal status flushes at once;
- anything else flushes what is pending and is appended as it is.

Pure logic: the actor owns the 60 ms timer and calls `flush` when it fires. At most one row is
pending at any time, so a flush is never more than one row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from corral_server.domain.timeline import AssistantMessage, Reasoning, ToolCall
from corral_server.providers.base import ProviderItem
from corral_server.timeline.store import NewRow

# Seed 000, section 6.2: AGENT_STREAM_COALESCE_DEFAULT_WINDOW_MS = 60.
WINDOW_MS = 60


@dataclass(frozen=True, slots=True)
class Offered:
    """What the actor must do after offering a fragment."""

    ready: tuple[NewRow, ...]  # append these now, in order
    arm_timer: bool  # a row became pending: flush it after the window


class Coalescer:
    def __init__(self) -> None:
        # Invariant: when set, `_pending` holds an assistant, reasoning or non-terminal tool
        # row; `_parts` holds the text fragments of a pending assistant/reasoning row (joined
        # once at flush: joining on every fragment would copy a long message quadratically).
        self._pending: NewRow | None = None
        self._parts: list[str] = []
        self._key: tuple[object, ...] = ()

    @property
    def has_pending(self) -> bool:
        return self._pending is not None

    def flush(self) -> NewRow | None:
        row, parts = self._pending, self._parts
        self._pending, self._parts, self._key = None, [], ()
        if row is not None and len(parts) > 1:
            item = row.item
            assert isinstance(item, AssistantMessage | Reasoning)  # only text rows have parts
            row = row._replace(item=replace(item, text="".join(parts)))
        return row

    def offer(self, event: ProviderItem, now_ms: int) -> Offered:
        item = event.item
        match item:
            case AssistantMessage() | Reasoning():
                if not item.text:
                    return Offered((), False)
                key: tuple[object, ...] = (type(item), event.turn_id, _message_key(event))
                if self._pending is not None and key == self._key:
                    self._parts.append(item.text)
                    return Offered((), False)
                ready = self._take()
                self._pending, self._parts, self._key = _new_row(event, now_ms), [item.text], key
                return Offered(ready, True)
            case ToolCall():
                key = (ToolCall, event.turn_id, item.call_id)
                same = self._pending is not None and key == self._key
                first_ms = self._pending.timestamp_ms if same and self._pending else now_ms
                ready = () if same else self._take()
                row = _new_row(event, first_ms)
                if item.status.is_terminal:
                    self._pending, self._parts, self._key = None, [], ()
                    return Offered((*ready, row), False)
                self._pending, self._parts, self._key = row, [], key
                return Offered(ready, not same)
            case _:
                return Offered((*self._take(), _new_row(event, now_ms)), False)

    def _take(self) -> tuple[NewRow, ...]:
        row = self.flush()
        return (row,) if row is not None else ()


def _message_key(event: ProviderItem) -> str:
    item = event.item
    if event.provider_message_id:
        return event.provider_message_id
    if isinstance(item, AssistantMessage):
        return item.message_id
    return ""


def _new_row(event: ProviderItem, now_ms: int) -> NewRow:
    return NewRow(
        item=event.item,
        timestamp_ms=now_ms,
        turn_id=event.turn_id,
        provider_message_id=event.provider_message_id,
    )

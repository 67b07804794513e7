"""Joins streaming fragments into whole timeline rows (docs/design.md#coalescing).

- empty text fragments are swallowed;
- consecutive assistant (or reasoning) fragments of one message are joined into one row;
- tool-call updates with the same call_id replace each other; a terminal status flushes at once;
- anything else flushes what is pending and is appended as it is.

No row is bigger than `max_row_bytes` (MAX_ROW_BYTES; manager/oversize.py states the rules):
assistant and reasoning text that would make a bigger row is split into consecutive rows of
the same message at a character boundary: each full row is ready at once, the rest stays
pending. A tool call's output over 256 KiB is kept apart, whole (manager/tool_output.py); any
other item too big is cut by `fit_item`, with a marker.

Pure logic: the actor owns the 60 ms timer and calls `flush` when it fires. At most one row is
pending at any time, so a flush is never more than one row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from corral_server.domain.timeline import MAX_ROW_BYTES, AssistantMessage, Reasoning, ToolCall
from corral_server.manager.oversize import fit_item, text_pieces
from corral_server.manager.tool_output import spill
from corral_server.providers.base import ProviderItem
from corral_server.timeline.size import text_bytes
from corral_server.timeline.store import NewRow

# How long a pending row waits for more fragments: short enough not to be seen, long enough
# to join a burst of tokens into one row (docs/design.md#coalescing).
WINDOW_MS = 60


class Offered(NamedTuple):
    """What the actor must do after offering a fragment. (A NamedTuple: one per streamed
    fragment; built with `_offered`, which skips its Python-level __new__.)"""

    ready: tuple[NewRow, ...]  # append these now, in order
    arm_timer: bool  # a row became pending: flush it after the window


_new = tuple.__new__
_NOTHING = Offered((), False)  # the usual answer to a fragment joined to the pending row
_ARMED = Offered((), True)


def _offered(ready: tuple[NewRow, ...], arm_timer: bool) -> Offered:
    if not ready:
        return _ARMED if arm_timer else _NOTHING
    return _new(Offered, (ready, arm_timer))


class Coalescer:
    def __init__(self, max_row_bytes: int = MAX_ROW_BYTES) -> None:
        self._max_row_bytes = max_row_bytes
        # Invariant: when set, `_pending` holds an assistant, reasoning or non-terminal tool
        # row; `_parts` holds the text fragments of a pending assistant/reasoning row (joined
        # once at flush: joining on every fragment would copy a long message quadratically).
        self._pending: NewRow | None = None
        self._parts: list[str] = []
        self._key: tuple[object, ...] = ()
        # Of a pending text row: the UTF-8 bytes of its parts, and the most its text may hold.
        self._bytes = 0
        self._room = 0

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
                return self._text(event, item, now_ms)
            case ToolCall():
                key = (ToolCall, event.turn_id, item.call_id)
                same = self._pending is not None and key == self._key
                first_ms = self._pending.timestamp_ms if same and self._pending else now_ms
                ready = () if same else self._take()
                row = self._fitted(event, first_ms)
                if item.status.is_terminal:
                    self._pending, self._parts, self._key = None, [], ()
                    return _offered((*ready, row), False)
                self._pending, self._parts, self._key = row, [], key
                return _offered(ready, not same)
            case _:
                return _offered((*self._take(), self._fitted(event, now_ms)), False)

    def _text(
        self, event: ProviderItem, item: AssistantMessage | Reasoning, now_ms: int
    ) -> Offered:
        """`offer` of a text fragment: the hot path (every streamed token), its steps inline."""
        text = item.text
        if not text:
            return _NOTHING
        size = len(text) if text.isascii() else text_bytes(text)
        turn_id, message_key = event.turn_id, event.provider_message_id
        if not message_key and isinstance(item, AssistantMessage):
            message_key = item.message_id
        key: tuple[object, ...] = (type(item), turn_id, message_key)
        ready: tuple[NewRow, ...] = ()
        pending = self._pending
        if pending is not None:
            if key == self._key:
                if self._bytes + size <= self._room:
                    self._parts.append(text)
                    self._bytes += size
                    return _NOTHING
                return _offered(self._split(event, now_ms), True)
            # A pending row of one part is ready as it is (`flush` without its calls).
            ready = (pending,) if len(self._parts) == 1 else self._take()
        row = _new(NewRow, (item, now_ms, turn_id, event.provider_message_id, None))
        self._pending, self._parts, self._key, self._bytes = row, [text], key, size
        # A text row is its text, its message id and 12 bytes of tags and lengths,
        # 6 more with an id (timeline/size.py, item_bytes). One whose id alone fills
        # it still takes some text (64 bytes) per row.
        room = self._max_row_bytes - 12
        if type(item) is AssistantMessage and (message_id := item.message_id):
            id_size = len(message_id) if message_id.isascii() else text_bytes(message_id)
            room -= 6 + id_size
            room = room if room > 64 else 64
        self._room = room
        if size <= room:
            return _offered(ready, True)
        return _offered((*ready, *self._split(None, now_ms)), True)

    def _take(self) -> tuple[NewRow, ...]:
        row = self.flush()
        return (row,) if row is not None else ()

    def _split(self, event: ProviderItem | None, now_ms: int) -> tuple[NewRow, ...]:
        """The pending text (plus `event`'s) is more than a row may hold: the full rows it
        makes, in order; the rest stays pending. Rows after the first are timestamped now."""
        pending = self._pending
        assert pending is not None and isinstance(pending.item, AssistantMessage | Reasoning)
        if event is not None:
            assert isinstance(event.item, AssistantMessage | Reasoning)
            self._parts.append(event.item.text)
        pieces = text_pieces("".join(self._parts), self._room)
        rows = [pending._replace(item=replace(pending.item, text=piece)) for piece in pieces[:-1]]
        rows[1:] = [row._replace(timestamp_ms=now_ms) for row in rows[1:]]
        last = pieces[-1]
        self._pending = pending._replace(timestamp_ms=now_ms, item=replace(pending.item, text=last))
        self._parts, self._bytes = [last], text_bytes(last)
        return tuple(rows)

    def _fitted(self, event: ProviderItem, now_ms: int) -> NewRow:
        row = _new_row(event, now_ms)
        item, output = spill(row.item)  # a large tool output is kept apart, whole
        item = fit_item(item, self._max_row_bytes)
        return row if item is row.item else row._replace(item=item, output=output)


def _new_row(event: ProviderItem, now_ms: int) -> NewRow:
    return NewRow(
        item=event.item,
        timestamp_ms=now_ms,
        turn_id=event.turn_id,
        provider_message_id=event.provider_message_id,
    )

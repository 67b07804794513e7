"""The conversation an ACP agent replays on `session/load`, as history items (ImportAgent).

`session/load` replays the stored session as `session/update` notifications before it
answers. For an import they are kept and mapped here: `user_message_chunk`s become the user's
messages, everything else as `acp_items.ItemMapper` maps a live turn. History rows are not
coalesced (docs/design.md#resume), so this joins what the coalescer would have: consecutive
chunks of one message become one item, and a tool call's updates become its latest state, in
the place of its first report. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from acp import schema

from corral_server.domain.timeline import AssistantMessage, Reasoning, ToolCall, UserMessage
from corral_server.providers.acp_items import ItemMapper, Update, text_of
from corral_server.providers.base import ProviderItem


def history_items(updates: Iterable[Update]) -> list[ProviderItem]:
    mapper = ItemMapper()
    mapper.start_turn("history")
    out: list[ProviderItem] = []
    calls: dict[str, int] = {}  # call id -> its index in `out`
    for update in updates:
        if isinstance(update, schema.UserMessageChunk):
            message_id = mapper.segment(update.session_update)
            text = text_of(update.content)
            if text:
                _add(out, ProviderItem("", UserMessage(text, message_id=message_id), message_id))
            continue
        for item in mapper.map(update):
            if isinstance(item.item, ToolCall):
                known = calls.get(item.item.call_id)
                if known is not None:
                    out[known] = item
                    continue
                calls[item.item.call_id] = len(out)
                out.append(item)
            else:
                _add(out, item)
    return [item._replace(turn_id="", from_history=True) for item in out]


def _add(out: list[ProviderItem], item: ProviderItem) -> None:
    """Append `item`, or join it to the previous item when both are text of one message."""
    last = out[-1] if out else None
    if last is None or not item.provider_message_id:
        out.append(item)
        return
    if last.provider_message_id != item.provider_message_id:
        out.append(item)
        return
    match last.item, item.item:
        case UserMessage() as a, UserMessage() as b:
            out[-1] = last._replace(item=UserMessage(a.text + b.text, message_id=a.message_id))
        case AssistantMessage() as a, AssistantMessage() as b:
            out[-1] = last._replace(item=AssistantMessage(a.text + b.text, a.message_id))
        case Reasoning() as a, Reasoning() as b:
            out[-1] = last._replace(item=Reasoning(a.text + b.text))
        case _:
            out.append(item)

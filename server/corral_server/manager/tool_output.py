"""Large tool output: kept once beside the timeline, the row holding a preview and a reference.

A tool call's output bigger than SPILL_BYTES is taken out of its row before the row is stored:
the output's bytes (a text's UTF-8, or the compact JSON text of any other JSON value) go to the
store's output table in the row's own transaction, and the row keeps `output` = the first
PREVIEW_BYTES of that text and an `OutputRef` naming it (blob id, size, whether it is JSON).
FetchToolOutput pages the whole by bytes. The output then lives exactly as long as its row:
retention, rewind and rehydrate drop the two together (docs/architecture.md, the store).

Why 256 KiB: most tool output (a file read, a test run) is far below it and stays inline,
whole; above it, the row would eat a large share of a FetchTimeline page (2 MiB) and of every
subscriber's batch for text nobody reads in a timeline view. A larger output is rare and worth
one more call. Up to MAX_OUTPUT_BYTES is kept; beyond that it is cut with the usual marker
(manager/oversize.py), which no provider's 16 MiB line reaches.

Pure logic, no I/O.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

from corral_server.domain.timeline import OutputRef, TimelineItem, ToolCall
from corral_server.manager.oversize import cut_text, text_pieces
from corral_server.timeline.size import json_bytes, text_bytes

SPILL_BYTES = 256 * 1024
PREVIEW_BYTES = 4 * 1024
MAX_OUTPUT_BYTES = 64 * 1024 * 1024


def spill(item: TimelineItem) -> tuple[TimelineItem, bytes | None]:
    """`item` and None when it keeps its output; else the item with a preview and an
    `OutputRef`, and the output's bytes to store with its row."""
    if type(item) is not ToolCall or item.output is None or item.output_ref is not None:
        return item, None
    output = item.output
    if isinstance(output, str):
        if text_bytes(output) <= SPILL_BYTES:
            return item, None
        text, is_json = output, False
    else:
        if json_bytes(output) <= SPILL_BYTES:
            return item, None
        text, is_json = _json_text(output), True
    text = cut_text(text, MAX_OUTPUT_BYTES)
    data = text.encode("utf-8", "replace")
    preview = text_pieces(text, PREVIEW_BYTES)[0]
    ref = OutputRef(uuid.uuid4().hex, len(data), True, is_json)
    return replace(item, output=preview, output_ref=ref), data


def _json_text(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (RecursionError, ValueError, TypeError):
        return "<JSON value that cannot be shown>"

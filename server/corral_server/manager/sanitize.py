"""PLACEHOLDER until the bounds branch lands: text that cannot be encoded is mended."""

from __future__ import annotations

from corral_server.domain.timeline import TimelineItem


def sanitize_text(text: str) -> str:
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode()
    return text


def sanitize_item(item: TimelineItem) -> TimelineItem:
    return item

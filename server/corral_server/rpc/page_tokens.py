"""Offset page tokens bound to one request: a token carries the offset of the next page and a
fingerprint of the request it paged (every field but the token and the page size), so a token
used with another request is refused instead of paging something else."""

from __future__ import annotations

import base64
import hashlib
import json

from google.protobuf.message import Message

from corral_server import errors


def fingerprint(request: Message) -> str:
    same = type(request)()
    same.CopyFrom(request)
    same.ClearField("page_token")
    same.ClearField("page_size")
    return hashlib.sha256(same.SerializeToString(deterministic=True)).hexdigest()[:16]


def token(offset: int, request: Message) -> str:
    raw = json.dumps({"o": offset, "f": fingerprint(request)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def offset(page_token: str, request: Message, max_offset: int | None = None) -> int:
    """The offset `page_token` (the request's) names (0 without one); INVALID_ARGUMENT for a
    token of another request, or past `max_offset`."""
    if not page_token:
        return 0
    try:
        padded = page_token + "=" * (-len(page_token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        at = data["o"]
        ok = (
            isinstance(at, int)
            and at > 0
            and (max_offset is None or at <= max_offset)
            and data["f"] == fingerprint(request)
        )
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        raise errors.InvalidArgument.field(
            "page_token", "not a page token of this query (page tokens belong to one request)"
        )
    return int(at)

"""Requests bounded before any work: counts and sizes checked on the protobuf message itself,
before a domain object is built from it.

A request can hold millions of tiny elements within the daemon's request size (8 MiB of empty
content parts is 4,000,000 parts): building a domain tuple of each, then validating it, blocked
the event loop for seconds and took hundreds of MB. The checks here look at counts first (O(1)
on a repeated field or a map) and only then at the elements, so a request over a limit costs
nothing more than its decoding. Each breach is INVALID_ARGUMENT with a field violation naming
the limit, like every other bad input. The domain checks (manager/validate.py) still run on
what passes: these only make sure they run on bounded input.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

from corral.v1 import content_pb2 as content_pb
from corral_server.errors import InvalidArgument
from corral_server.manager.validate import Limits

# A MIME type is short ("image/png"); RFC 6838 allows 127 characters for each of its halves.
MAX_MIME_TYPE_CHARS = 255


def check_content(parts: Any, limits: Limits, field: str = "content") -> None:
    """Bound a repeated ContentPart field: how many parts, the UTF-8 bytes of their text (what
    the user row will hold), and the image sizes and MIME types."""
    count = len(parts)
    if count > limits.max_content_parts:
        raise _over(field, f"{count} content parts", limits.max_content_parts, "max_content_parts")
    text_bytes = 0
    other_bytes = 0
    texts = 0
    for i in range(count):
        part: content_pb.ContentPart = parts[i]
        which = part.WhichOneof("part")
        if which == "text":
            texts += 1
            text_bytes += len(part.text.encode())
        elif which == "image":
            check_string(part.image.mime_type, MAX_MIME_TYPE_CHARS, f"{field}[{i}].image.mime_type")
            other_bytes += part.image.ByteSize()
    text_bytes += max(0, texts - 1)  # the newlines that join text parts into one row
    if text_bytes > limits.max_prompt_bytes:
        raise _over(
            field, f"{text_bytes} bytes of text", limits.max_prompt_bytes, "max_prompt_bytes"
        )
    if other_bytes > limits.max_prompt_chars:
        raise _over(
            field, f"{other_bytes} bytes of images", limits.max_prompt_chars, "max_prompt_chars"
        )


def check_labels(labels: Sized, limits: Limits, field: str = "labels") -> None:
    """Bound a label map by its count; its keys and values are checked once it is a dict."""
    if len(labels) > limits.max_labels:
        raise _over(field, f"{len(labels)} labels", limits.max_labels, "max_labels")


def check_ids(ids: Any, limits: Limits, field: str) -> None:
    """Bound a repeated string field of ids: how many, and how long each is."""
    count = len(ids)
    if count > limits.max_ids:
        raise _over(field, f"{count} ids", limits.max_ids, "max_ids")
    for i in range(count):
        check_string(ids[i], limits.max_id_chars, f"{field}[{i}]")


def check_string(value: str, max_chars: int, field: str) -> None:
    """Bound one string field (an id, a request id) by its length in characters."""
    if len(value) > max_chars:
        raise _over(field, f"{len(value)} chars", max_chars, "chars")


def _over(field: str, what: str, limit: int, name: str) -> InvalidArgument:
    return InvalidArgument.field(field, f"{what}; the limit is {limit} ({name})")

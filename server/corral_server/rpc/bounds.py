"""PLACEHOLDER until the bounds branch lands."""

from __future__ import annotations

from collections.abc import Sequence

from corral.v1 import content_pb2 as content_pb
from corral_server.manager.validate import Limits


def check_content(
    parts: Sequence[content_pb.ContentPart], limits: Limits, field: str = "content"
) -> None:
    return None

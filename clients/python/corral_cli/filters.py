"""The options that narrow a cross-agent command (`search`, `usage`) to some agents and a
time range, and how they fill the request.

Must not: call the daemon.
"""

from __future__ import annotations

import argparse
import datetime

from google.protobuf.timestamp_pb2 import Timestamp


def add_agent_filters(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--agent",
        dest="agents",
        action="append",
        default=[],
        metavar="ID",
        help="only this agent (repeatable)",
    )
    cmd.add_argument("--label", default="", metavar="SELECTOR", help="only agents matching it")
    cmd.add_argument("--provider", action="append", default=[], help="only this provider")


def add_time_range(cmd: argparse.ArgumentParser, what: str) -> None:
    """--since and --until, for `what` ("rows", "turns ended")."""
    cmd.add_argument("--since", default="", metavar="ISO", help=f"{what} at or after this time")
    cmd.add_argument("--until", default="", metavar="ISO", help=f"{what} before this time")


def check_time_range(args: argparse.Namespace) -> str:
    """The usage error of a bad --since or --until ("" when both are fine)."""
    for name in ("since", "until"):
        value = getattr(args, name)
        if value and parse_time(value) is None:
            return f"--{name}: not an ISO date or time: {value!r}"
    return ""


def set_time_range(args: argparse.Namespace, start: Timestamp, end: Timestamp) -> None:
    for name, field in (("since", start), ("until", end)):
        if at := parse_time(getattr(args, name)):
            field.FromDatetime(at)


def parse_time(text: str) -> datetime.datetime | None:
    """An ISO date or time; without a zone, local time."""
    if not text:
        return None
    try:
        at = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo else at.astimezone()

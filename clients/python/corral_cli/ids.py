"""Agent ids as the user types them: a whole id, or any prefix of one that names exactly one
agent (like git and docker). Agent ids are 32 hex characters.

A whole id is passed on unchanged (the daemon answers NOT_FOUND for an unknown one); anything
shorter is looked up among every agent, archived ones included.

Must not: guess. An empty, unknown or ambiguous prefix is an error for the user
naming what matched (an `AgentIdError`), and the command does nothing (exit 2).
"""

from __future__ import annotations

import string

from corral.v1 import agent_service_pb2 as agent_pb
from corral_cli.client import Client

AGENT_ID_CHARS = 32
# ListAgents' largest page: fewest round trips.
_PAGE_SIZE = 1000
# Candidates named in an ambiguity message.
_SHOWN = 5


class AgentIdError(Exception):
    """The text does not name exactly one agent; the message says why, for the user, and
    `code` is the status the daemon would give (NOT_FOUND, or INVALID_ARGUMENT)."""

    def __init__(self, message: str, code: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message)
        self.code = code


def is_whole(text: str) -> bool:
    return len(text) == AGENT_ID_CHARS and all(c in string.hexdigits for c in text)


def resolve(client: Client, text: str) -> str:
    """The one agent id that is `text` or starts with it."""
    if is_whole(text):
        return text
    if not text:
        raise AgentIdError("the agent id is empty")
    matches = [agent_id for agent_id in _all_ids(client) if agent_id.startswith(text)]
    if text in matches:  # an id of another shape (not 32 hex) given whole
        return text
    if not matches:
        raise AgentIdError(
            f"no agent id starts with {text!r} (`corral ls --all` lists them)", "NOT_FOUND"
        )
    if len(matches) > 1:
        shown = ", ".join(sorted(matches)[:_SHOWN])
        more = f" and {len(matches) - _SHOWN} more" if len(matches) > _SHOWN else ""
        raise AgentIdError(
            f"{text!r} is ambiguous: {len(matches)} agent ids start with it ({shown}{more}); "
            "give more characters"
        )
    return matches[0]


def _all_ids(client: Client) -> list[str]:
    request = agent_pb.ListAgentsRequest(page_size=_PAGE_SIZE, include_archived=True)
    ids: list[str] = []
    while True:
        page = client.agents.ListAgents(request, timeout=client.timeout_s)
        ids.extend(agent.id for agent in page.agents)
        if not page.next_page_token:
            return ids
        request.page_token = page.next_page_token

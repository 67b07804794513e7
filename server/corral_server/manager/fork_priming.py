"""ForkAgent's fallback (docs/design.md#forks): a provider without a fork of its own gets a new
session primed with the conversation before the cut, as one priming turn.

The context attachment is the activity digest of the fork's rows (timeline/activity.py: user
and assistant text, tool names with a short input and status, newest rows first within the
budget), every line quoted with "> " so that no line of it reads as a command, between a
header saying what it is and a request to answer with one short line. The priming turn runs
on the provider session directly, before the fork has an actor: nothing it reports is stored
(its rows would repeat what the fork's timeline already holds), its usage counts nowhere, a
permission it asks for is denied, and the session is closed when the turn ends, so its process
is gone. The fork's first turn resumes the session by id.

Must not: touch an agent's state or timeline, or leave a session open (success or failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from corral_server import errors
from corral_server.domain.agent import PermissionBehavior, PermissionResponse
from corral_server.domain.content import Prompt, TextPart
from corral_server.manager.creation import Creation
from corral_server.manager.deadlines import deadline
from corral_server.providers.base import (
    Provider,
    ProviderEvent,
    ProviderPermissionRequested,
    ProviderSession,
    ProviderSessionDied,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    SessionConfig,
)
from corral_server.timeline.activity import ActivityDigest

log = logging.getLogger(__name__)

_ENDINGS = (ProviderTurnCompleted, ProviderTurnFailed, ProviderTurnCanceled, ProviderSessionDied)

# The digest's budget: about 25 k tokens, room for a long conversation's gist in any model's
# context, and well inside a prompt's limits (manager/validate.py).
ATTACHMENT_CHARS = 100_000
# A priming turn is one model call over the attachment: a minute or two at most; this bounds a
# provider that never ends it.
PRIME_TURN_S = 300.0

HEADER = (
    "[corral: context of a forked conversation]\n"
    "This session continues a conversation that started elsewhere. Below is a summary of it"
    " up to the point it was forked, oldest first (each line quoted with '> ')."
)
FOOTER = (
    "[end of context]\n"
    "Keep this context for the messages that follow. Do not act on it now: answer only"
    " with 'ready'."
)


def attachment(digest: ActivityDigest) -> Prompt:
    """The priming prompt of a fork whose rows `digest` summarises."""
    quoted = "\n".join(f"> {line}" for line in digest.text.splitlines())
    cut = "(older messages left out)\n" if digest.truncated else ""
    return (TextPart(f"{HEADER}\n{cut}{quoted}\n{FOOTER}"),)


async def primed_session(
    provider: Provider, config: SessionConfig, prompt: Prompt, creation: Creation
) -> str:
    """Open a session, run the priming turn, close the session; its id. A turn that does not
    complete is FORK_FAILED (DEADLINE_EXCEEDED past PRIME_TURN_S)."""
    # What the turn reports that matters here: its permissions and its end (items are dropped).
    heard: asyncio.Queue[ProviderEvent] = asyncio.Queue()

    def sink(event: ProviderEvent) -> None:
        if isinstance(event, (ProviderPermissionRequested, *_ENDINGS)):
            heard.put_nowait(event)

    wiring = creation.wiring
    clock, timeouts, times = wiring.clock, wiring.timeouts, wiring.call_times
    create = provider.create_session(config, sink)
    session = await deadline(clock, timeouts.create_session_s, create, "create_session", times)
    try:
        start = session.start_turn(prompt)
        turn_id = await deadline(clock, timeouts.start_turn_s, start, "start_turn", times)
        ended = _ended(session, turn_id, heard)
        end = await deadline(clock, PRIME_TURN_S, ended, "prime", times)
        if not isinstance(end, ProviderTurnCompleted):
            raise errors.ForkFailed(f"the priming turn of the fork did not complete: {_why(end)}")
        return session.session_id
    finally:
        with contextlib.suppress(Exception):
            await deadline(clock, timeouts.close_s, session.close(), "close", times)


async def _ended(
    session: ProviderSession, turn_id: str, heard: asyncio.Queue[ProviderEvent]
) -> ProviderEvent:
    """The turn's end; a permission it asks for meanwhile is denied (priming runs no tool)."""
    deny = PermissionResponse(PermissionBehavior.DENY, message="a priming turn runs no tools")
    while True:
        event = await heard.get()
        if not isinstance(event, ProviderPermissionRequested):
            return event
        try:
            await session.respond_permission(turn_id, event.permission.id, deny)
        except Exception:
            log.info("fork: denying a priming turn's permission failed", exc_info=True)


def _why(event: ProviderEvent) -> str:
    match event:
        case ProviderTurnFailed(error=error):
            return error.message
        case ProviderTurnCanceled(reason=reason):
            return f"canceled ({reason or 'no reason'})"
        case ProviderSessionDied(reason=reason):
            return f"the agent process ended ({reason})"
        case _:
            return type(event).__name__

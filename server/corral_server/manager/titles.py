"""An agent's title and who set it (docs/design.md#titles): the fallback cut from the first
prompt, and the rule for which source may replace which. Pure functions; the actor applies
what they return on its queue.

Must not: replace a title a person set, or raise (a title never touches a turn).
"""

from __future__ import annotations

from dataclasses import replace

from corral_server.domain.agent import Agent, TitleSource
from corral_server.domain.content import Prompt, prompt_text
from corral_server.manager.sanitize import sanitize_text

# A fallback title's length in characters, the ellipsis included: about what a list row or a
# window title shows whole.
MAX_FALLBACK_CHARS = 60
ELLIPSIS = "…"
_SCANNED_CHARS = 8_192
# A provider's title is kept to the API's title limit (manager/validate.py's default).
MAX_PROVIDER_TITLE_CHARS = 1_000


def fallback_title(prompt: Prompt) -> str:
    """The prompt's first non-blank line, cut on a word boundary to MAX_FALLBACK_CHARS (with
    an ellipsis when cut); "" for a prompt without text."""
    # The head only: a prompt may be megabytes, its first line is near the start.
    head = prompt_text(prompt)[:_SCANNED_CHARS]
    line = next((ln.strip() for ln in head.splitlines() if ln.strip()), "")
    line = " ".join(sanitize_text(line).split())
    if len(line) <= MAX_FALLBACK_CHARS:
        return line
    room = MAX_FALLBACK_CHARS - len(ELLIPSIS)
    cut = line[: room + 1].rfind(" ")
    # One word longer than the room is cut inside it rather than dropped.
    kept = line[:cut] if cut > 0 else line[:room]
    return kept.rstrip(" ,.;:-") + ELLIPSIS


def _is_users(agent: Agent) -> bool:
    # A title without a source is from a record written before sources were stored, when
    # only a person could set one.
    return agent.title_source is TitleSource.USER or (
        agent.title_source is TitleSource.NONE and agent.title != ""
    )


def with_prompt_title(agent: Agent, prompt: Prompt) -> Agent:
    """The agent with its fallback title, when it has no title yet."""
    if agent.title or agent.title_source is not TitleSource.NONE:
        return agent
    title = fallback_title(prompt)
    return replace(agent, title=title, title_source=TitleSource.PROMPT) if title else agent


def with_provider_title(agent: Agent, title: str) -> Agent:
    """The agent with the provider's title, unless a person set one (or it is no change)."""
    title = " ".join(sanitize_text(title).split())[:MAX_PROVIDER_TITLE_CHARS]
    if not title or _is_users(agent) or title == agent.title:
        return agent
    return replace(agent, title=title, title_source=TitleSource.PROVIDER)

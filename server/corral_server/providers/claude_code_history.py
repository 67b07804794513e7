"""A Claude Code session's conversation, read from its transcript, for ImportAgent.

Claude Code keeps each session as JSON lines in
`$CLAUDE_CONFIG_DIR/projects/<cwd with every non-alphanumeric character as "-">/<id>.jsonl`
(`~/.claude` without CLAUDE_CONFIG_DIR). Its `user` and `assistant` lines have the shape of
the stream-json lines (`claude_code_items.ItemMapper` maps them, text whole); sidechains (a
sub-agent's own conversation), meta lines and the rest (summaries, snapshots) are not the
conversation. A line that does not parse is skipped, so a transcript cut by a crash still
imports.

Reads files only: it must not start Claude Code or write anything.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from corral_server.domain.timeline import UserMessage
from corral_server.errors import InvalidArgument, ProviderSessionNotFound
from corral_server.providers.base import ProviderItem
from corral_server.providers.claude_code_items import ItemMapper
from corral_server.providers.claude_code_messages import UserLine, as_line

# Claude Code's session ids are UUIDs; anything that could leave the projects folder is refused.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
# A transcript larger than this is refused rather than read into memory whole.
MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024
# The note Claude Code writes as a user line after an interrupt: not the user's words.
_INTERRUPTED = "[Request interrupted by user"


def config_dir(env: Mapping[str, str]) -> Path:
    configured = env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured)
    return Path(env.get("HOME", str(Path.home()))) / ".claude"


def project_slug(cwd: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def transcript_path(env: Mapping[str, str], session_id: str, cwd: str) -> Path:
    """Where session `session_id` started in `cwd` is kept; a session kept under another
    project folder (started elsewhere) is found too."""
    if not _SESSION_ID.fullmatch(session_id):
        raise InvalidArgument.field(
            "provider_session_id", "not a Claude Code session id (letters, digits, - and _)"
        )
    projects = config_dir(env) / "projects"
    path = projects / project_slug(cwd) / f"{session_id}.jsonl"
    if path.is_file():
        return path
    found = sorted(projects.glob(f"*/{session_id}.jsonl"))
    if found:
        return found[0]
    raise ProviderSessionNotFound(session_id, f"no transcript {session_id}.jsonl under {projects}")


async def import_history(env: Mapping[str, str], session_id: str, cwd: str) -> list[ProviderItem]:
    path = transcript_path(env, session_id, cwd)
    text = await asyncio.to_thread(_read, path)
    return transcript_items(text.splitlines())


def _read(path: Path) -> str:
    if path.stat().st_size > MAX_TRANSCRIPT_BYTES:
        raise InvalidArgument.field(
            "provider_session_id", f"its transcript is over {MAX_TRANSCRIPT_BYTES} bytes"
        )
    return path.read_text("utf-8", errors="replace")


def transcript_items(lines: list[str]) -> list[ProviderItem]:
    mapper = ItemMapper()
    out: list[ProviderItem] = []
    for raw in lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict) or line.get("isSidechain") or line.get("isMeta"):
            continue
        match line.get("type"):
            case "user":
                out += _user_text(cast(UserLine, line))
                out += mapper.map(as_line(line))  # its tool results
            case "assistant":
                out += mapper.map(as_line(line))
            case _:
                pass
    return [item._replace(from_history=True) for item in out]


def _user_text(line: UserLine) -> list[ProviderItem]:
    """The user's own words (a string, or text blocks beside no tool result)."""
    message = line.get("message")
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict)]
        if any(b.get("type") == "tool_result" for b in blocks):
            return []
        texts = [b.get("text") for b in blocks if b.get("type") == "text"]
        text = "\n".join(t for t in texts if isinstance(t, str))
    else:
        return []
    if not text or text.startswith(_INTERRUPTED):
        return []
    message_id = str(line.get("uuid") or "")
    return [ProviderItem("", UserMessage(text, message_id=message_id), message_id)]

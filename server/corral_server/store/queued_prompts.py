"""The `queued_prompts` table: the content of every queued prompt, stored once.

An agent record keeps only its queued prompts' summaries (the codec writes what a listing
shows); the content lives here, one row per content part, written when the prompt first
appears in a record and deleted when a record no longer holds it. Before, every rewrite of an
agent's record (every change of its state) stored every queued prompt again.

`QueuedContent` knows what the table holds (`_written`: agent -> client_message_id -> the very
QueuedPrompt object stored), so a write of an agent whose queue did not change costs no SQL.
`sync` runs in the writer thread, inside the record write's transaction (a record and its
prompts commit together), and only returns what the table holds once that transaction commits;
`committed` takes it in on the loop, after the commit and before the next write runs. So a
transaction rolled back (a failed commit, or a batch re-run one job at a time to find the
culprit) changes nothing known. A prompt taken out and queued again under the same
client_message_id before a commit is another object, so it is written again. An agent neither
written nor loaded is new: it has no rows. One loaded with rows its record does not name
(`_suspect`) has its rows replaced whole at its next write. `load` runs in the reader thread at
start-up, before any write.

Must not: import protobuf or grpc, or run SQLite on the loop.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from corral_server.domain.agent import Agent, QueuedPrompt
from corral_server.domain.content import ImagePart, Prompt, TextPart

log = logging.getLogger(__name__)

_INSERT = (
    "INSERT OR REPLACE INTO queued_prompts"
    " (agent_id, client_message_id, part, text, mime_type, data) VALUES (?, ?, ?, ?, ?, ?)"
)
_DELETE_ONE = "DELETE FROM queued_prompts WHERE agent_id = ? AND client_message_id = ?"
_DELETE_ALL = "DELETE FROM queued_prompts WHERE agent_id = ?"


# What one transaction leaves in the table: agent -> its stored prompts (empty: none).
Written = dict[str, dict[str, QueuedPrompt]]


class QueuedContent:
    def __init__(self) -> None:
        self._written: Written = {}
        self._suspect: set[str] = set()

    def committed(self, written: Written) -> None:
        """On the loop: a transaction holding these writes committed."""
        self._written.update(written)
        self._suspect.difference_update(written)

    def sync(self, conn: sqlite3.Connection, agent: Agent) -> dict[str, QueuedPrompt]:
        """In the writer thread: make the table hold exactly `agent`'s queued prompts; what
        it then holds (for `committed`)."""
        wanted = {q.client_message_id: q for q in agent.queued_prompts if q.content}
        written = self._written.get(agent.id)
        if written is None:
            if agent.id in self._suspect:
                conn.execute(_DELETE_ALL, (agent.id,))
            written = {}
        for cm_id, stored in written.items():
            if wanted.get(cm_id) is not stored:
                conn.execute(_DELETE_ONE, (agent.id, cm_id))
        for cm_id, prompt in wanted.items():
            if written.get(cm_id) is not prompt:
                conn.executemany(_INSERT, _rows(agent.id, cm_id, prompt.content))
        return wanted

    def delete(self, conn: sqlite3.Connection, agent_id: str) -> dict[str, QueuedPrompt]:
        conn.execute(_DELETE_ALL, (agent_id,))
        return {}

    def load(self, conn: sqlite3.Connection, agents: Sequence[Agent]) -> list[Agent]:
        """In the reader thread: `agents` with their queued prompts' content joined."""
        stored = _read_all(conn)
        joined: list[Agent] = []
        for agent in agents:
            contents = stored.pop(agent.id, {})
            queue = _joined(agent, contents)
            if contents.keys() <= {q.client_message_id for q in queue}:
                # Known as written: what came from the table. A prompt whose content came
                # from its record (one written before this table) is written at the next put.
                self._written[agent.id] = {
                    q.client_message_id: q for q in queue if q.client_message_id in contents
                }
            else:  # rows the record does not name
                self._suspect.add(agent.id)
            joined.append(replace(agent, queued_prompts=queue) if queue else agent)
        return joined


def _joined(agent: Agent, contents: dict[str, Prompt]) -> tuple[QueuedPrompt, ...]:
    queue: list[QueuedPrompt] = []
    for q in agent.queued_prompts:
        content = contents.get(q.client_message_id) or q.content
        if not content:
            log.error(
                "agent %s: the text of queued prompt %r is missing; dropped",
                agent.id,
                q.client_message_id,
            )
            continue
        queue.append(q if content is q.content else replace(q, content=content))
    return tuple(queue)


def _rows(
    agent_id: str, cm_id: str, prompt: Prompt
) -> list[tuple[str, str, int, bytes | None, str | None, bytes | None]]:
    rows: list[tuple[str, str, int, bytes | None, str | None, bytes | None]] = []
    for i, part in enumerate(prompt):
        if isinstance(part, TextPart):
            rows.append(
                (agent_id, cm_id, i, part.text.encode("utf-8", "surrogatepass"), None, None)
            )
        else:
            rows.append((agent_id, cm_id, i, None, part.mime_type, part.data))
    return rows


def _read_all(conn: sqlite3.Connection) -> dict[str, dict[str, Prompt]]:
    parts: dict[str, dict[str, list[TextPart | ImagePart]]] = {}
    for agent_id, cm_id, text, mime_type, data in conn.execute(
        "SELECT agent_id, client_message_id, text, mime_type, data FROM queued_prompts"
        " ORDER BY agent_id, client_message_id, part"
    ):
        part: TextPart | ImagePart = (
            TextPart(bytes(text).decode("utf-8", "surrogatepass"))
            if text is not None
            else ImagePart(mime_type or "", bytes(data or b""))
        )
        parts.setdefault(agent_id, {}).setdefault(cm_id, []).append(part)
    return {
        agent_id: {cm_id: tuple(content) for cm_id, content in prompts.items()}
        for agent_id, prompts in parts.items()
    }

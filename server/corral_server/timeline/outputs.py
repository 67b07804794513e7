"""Tool outputs kept apart from their rows, in memory (the in-memory store's half of
manager/tool_output.py; the SQLite store keeps them in its `tool_outputs` table).

An output belongs to one row: (agent, epoch, seq). It is readable while that row is retained
in the agent's current epoch; a rewind's copy of the row (same `output_ref`, no bytes) takes
it over in the new epoch. What no row holds any more is swept: by retention at once, and the
outputs of a re-based epoch at the agent's next rebase or drop (until then they are unreadable,
as their rows are gone). All outputs together hold at most `max_total_bytes`: past that, the
oldest are evicted (their rows keep the preview; FetchToolOutput answers NOT_FOUND), so a
daemon without a state directory never grows without bound.

Pure data structure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral_server.errors import InvalidArgument, ToolOutputNotFound
from corral_server.timeline.store import OutputChunk

# 256 MiB: room for dozens of large outputs, far below what a daemon's memory holds.
DEFAULT_MAX_TOTAL_BYTES = 256 * 1024 * 1024


@dataclass(slots=True)
class _Output:
    agent_id: str
    epoch: str
    seq: int
    data: bytes
    json: bool


class MemoryOutputs:
    def __init__(self, max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES) -> None:
        self._max_total_bytes = max_total_bytes
        self._outputs: dict[str, _Output] = {}  # blob id -> output, oldest first
        self._by_agent: dict[str, set[str]] = {}
        self._total_bytes = 0

    def put(
        self, agent_id: str, epoch: str, seq: int, blob_id: str, data: bytes, json: bool
    ) -> None:
        self._evict(len(data))
        self._outputs[blob_id] = _Output(agent_id, epoch, seq, data, json)
        self._by_agent.setdefault(agent_id, set()).add(blob_id)
        self._total_bytes += len(data)

    def take_over(self, agent_id: str, epoch: str, seq: int, blob_id: str) -> None:
        """A copy of the output's row at (epoch, seq) now holds it."""
        output = self._outputs.get(blob_id)
        if output is not None and output.agent_id == agent_id:
            output.epoch, output.seq = epoch, seq

    def trim(self, agent_id: str, epoch: str, first: int) -> None:
        """Retention: forget the outputs of the rows before `first`."""
        ids = self._by_agent.get(agent_id)
        if not ids:
            return
        for blob_id in list(ids):
            output = self._outputs[blob_id]
            if output.epoch == epoch and output.seq < first:
                self._forget(blob_id)

    def sweep(self, agent_id: str, keep_epoch: str | None) -> None:
        """Forget the agent's outputs of every epoch but `keep_epoch` (None: all of them)."""
        for blob_id in list(self._by_agent.get(agent_id, ())):
            if self._outputs[blob_id].epoch != keep_epoch:
                self._forget(blob_id)

    def read(
        self, agent_id: str, blob_id: str, window: tuple[str, int, int], offset: int, limit: int
    ) -> OutputChunk:
        """`window`: the agent's current epoch, first and next seq."""
        output = self._outputs.get(blob_id)
        epoch, first, next_seq = window
        if (
            output is None
            or output.agent_id != agent_id
            or output.epoch != epoch
            or not first <= output.seq < next_seq
        ):
            raise ToolOutputNotFound(agent_id, blob_id)
        return chunk(output.data, offset, limit, output.json)

    def _evict(self, incoming: int) -> None:
        while self._outputs and self._total_bytes + incoming > self._max_total_bytes:
            self._forget(next(iter(self._outputs)))

    def _forget(self, blob_id: str) -> None:
        output = self._outputs.pop(blob_id)
        self._total_bytes -= len(output.data)
        ids = self._by_agent[output.agent_id]
        ids.discard(blob_id)
        if not ids:
            del self._by_agent[output.agent_id]


def check_offset(offset: int, size_bytes: int) -> None:
    if offset > size_bytes:
        raise InvalidArgument.field(
            "offset", f"{offset} is past the output's end ({size_bytes} bytes)"
        )


def chunk(data: bytes, offset: int, limit: int, json: bool) -> OutputChunk:
    check_offset(offset, len(data))
    return OutputChunk(data[offset : offset + limit], offset, len(data), json)

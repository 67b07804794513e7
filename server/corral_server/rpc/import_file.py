"""AgentService.ImportAgentExport: an ExportAgent JSON Lines file, streamed in by the client,
becomes a new agent.

The file is read line by line as its chunks arrive (no line may pass MAX_LINE_BYTES, no file
MAX_FILE_BYTES, no message MAX_CHUNK_BYTES), each line checked as strictly as any request
(rpc/export_jsonl.py parses; a row passes the same mending and size rule as a provider's);
its rows go to the store in batches under a timeline nobody sees, and the agent is listed
only once the end line has come and matched the header. A bad or truncated file answers
INVALID_ARGUMENT / BAD_IMPORT_FILE naming the line, and leaves nothing behind.

The agent's header gives provider, cwd, model, mode, title and labels, validated as
CreateAgent validates them (the request may replace cwd and provider; the parent label is
dropped: an import is a root). Rows keep their timestamps, turn ids, provider message ids
and items; seqs are renumbered from 1 under a new epoch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral_server import errors
from corral_server.domain.agent import PARENT_AGENT_ID_LABEL
from corral_server.domain.timeline import MAX_ROW_BYTES
from corral_server.manager.manager import AgentManager
from corral_server.manager.sanitize import sanitize_item, sanitize_text
from corral_server.manager.specs import CreateSpec
from corral_server.rpc import convert, export_jsonl
from corral_server.rpc.items import row_from_pb
from corral_server.timeline.size import row_bytes
from corral_server.timeline.store import NewRow

MAX_CHUNK_BYTES = 3 << 20  # per message: under a default client's 4 MiB
MAX_LINE_BYTES = 16 << 20  # a 2 MiB row's JSON, escapes and base64 images included
MAX_FILE_BYTES = 1 << 30
# Rows handed to the store at a time: bounds what the import holds in memory.
BATCH_ROWS = 1_000
BATCH_BYTES = 4 << 20
# Lines parsed between two yields to the loop: a line costs ~200 us (json_format), so other
# calls wait ~20 ms at most behind an import.
YIELD_LINES = 100
# A row's turn id and provider message id, as every id a request carries.
MAX_ID_CHARS = 256

Lines = AsyncIterator[tuple[int, bytes]]


@dataclass(slots=True)
class _Upload:
    """What the first message says beside its data, and the bytes received so far."""

    cwd: str = ""
    provider: str = ""
    total: int = 0


async def import_agent_export(
    manager: AgentManager, requests: AsyncIterator[svc_pb.ImportAgentExportRequest]
) -> svc_pb.ImportAgentExportResponse:
    upload = _Upload()
    try:
        return await _import(manager, _lines(requests, upload), upload)
    except errors.CorralError:
        # Read what the client still sends before answering: a client library (grpc's aio
        # one) that is still writing when the answer comes reports INTERNAL instead of it.
        async for request in requests:
            upload.total += len(request.data)
            if upload.total > MAX_FILE_BYTES:
                break
        raise


async def _import(
    manager: AgentManager, lines: Lines, upload: _Upload
) -> svc_pb.ImportAgentExportResponse:
    first = await anext(lines, None)
    if first is None:
        raise errors.BadImportFile(1, "the file is empty")
    header = export_jsonl.parse_header(first[1])
    spec = _spec(header.agent, upload)
    count = _Count()
    try:
        agent = await manager.creation.import_rows(spec, _batches(lines, header.rows, count))
    except errors.InvalidArgument as exc:
        if isinstance(exc, errors.BadImportFile) or count.started:
            raise
        raise errors.BadImportFile(1, f"agent: {exc.message}") from None
    return svc_pb.ImportAgentExportResponse(agent=convert.agent_to_pb(agent), rows=count.rows)


def _spec(agent: agent_pb.Agent, overrides: _Upload) -> CreateSpec:
    provider = overrides.provider or agent.provider
    same = provider == agent.provider  # another provider's models and modes do not apply
    labels = {k: v for k, v in agent.labels.items() if k != PARENT_AGENT_ID_LABEL}
    return CreateSpec(
        provider=provider,
        cwd=overrides.cwd or agent.cwd,
        model=agent.model if same else "",
        mode=agent.mode if same else "",
        title=agent.title,
        labels=labels,
    )


async def _lines(
    requests: AsyncIterator[svc_pb.ImportAgentExportRequest], upload: _Upload
) -> Lines:
    """(line number, line) of the file the messages carry, the last line with or without
    its newline."""
    rest = b""
    number = 0
    first = True
    async for request in requests:
        if first:
            upload.cwd, upload.provider, first = request.cwd, request.provider, False
        elif request.cwd or request.provider:
            raise errors.InvalidArgument.field("cwd", "cwd and provider go in the first message")
        if len(request.data) > MAX_CHUNK_BYTES:
            raise errors.InvalidArgument.field("data", f"at most {MAX_CHUNK_BYTES} bytes a message")
        upload.total += len(request.data)
        if upload.total > MAX_FILE_BYTES:
            raise errors.BadImportFile(number + 1, f"the file is over {MAX_FILE_BYTES} bytes")
        *complete, rest = (rest + request.data).split(b"\n")
        for line in complete:
            number += 1
            yield number, line
        if len(rest) > MAX_LINE_BYTES:
            raise errors.BadImportFile(number + 1, f"longer than {MAX_LINE_BYTES} bytes")
    if rest:
        yield number + 1, rest


@dataclass(slots=True)
class _Count:
    started: bool = False
    rows: int = 0


async def _batches(lines: Lines, expected: int, count: _Count) -> AsyncIterator[Sequence[NewRow]]:
    """The rows of the file's remaining lines, checked, in batches; the end line must come
    last and agree with the header."""
    count.started = True
    epoch, seq, number = "", 0, 1
    batch: list[NewRow] = []
    size = 0
    ended = False
    async for number, line in lines:
        if ended:
            raise errors.BadImportFile(number, "a line after the end line")
        end = export_jsonl.parse_end(line, number)
        if end is not None:
            if end != expected or count.rows != expected:
                raise errors.BadImportFile(
                    number,
                    f"the end line counts {end} rows, the header {expected}, "
                    f"the file holds {count.rows}",
                )
            ended = True
            continue
        row_epoch, row = export_jsonl.parse_row(line, number)
        if count.rows >= expected:
            raise errors.BadImportFile(number, f"more rows than the header's {expected}")
        if (epoch and row_epoch != epoch) or (seq and row.seq != seq + 1) or row.seq < 1:
            raise errors.BadImportFile(number, "rows must be one epoch's, in seq order, no gap")
        epoch, seq = row_epoch, row.seq
        new = _row(row, number)
        if number % YIELD_LINES == 0:
            await asyncio.sleep(0)
        batch.append(new)
        count.rows += 1
        size += len(line)
        if len(batch) >= BATCH_ROWS or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if not ended:
        raise errors.BadImportFile(
            number + 1,
            f"the file ends after {count.rows} of {expected} rows without its end line "
            "(cut short?)",
        )
    if batch:
        yield batch


def _row(row: timeline_pb.TimelineRow, number: int) -> NewRow:
    try:
        parsed = row_from_pb(row)
    except (ValueError, OverflowError) as exc:
        raise errors.BadImportFile(number, f"row: {exc}") from None
    for name in ("turn_id", "provider_message_id"):
        if len(getattr(row, name)) > MAX_ID_CHARS:
            raise errors.BadImportFile(number, f"{name} over {MAX_ID_CHARS} characters")
    mended = parsed._replace(
        item=sanitize_item(parsed.item),
        turn_id=sanitize_text(parsed.turn_id),
        provider_message_id=sanitize_text(parsed.provider_message_id),
    )
    if row_bytes(mended) > MAX_ROW_BYTES:
        raise errors.BadImportFile(number, f"a row over {MAX_ROW_BYTES} bytes")
    return NewRow(mended.item, mended.timestamp_ms, mended.turn_id, mended.provider_message_id)

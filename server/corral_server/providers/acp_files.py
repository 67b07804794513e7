"""The ACP client's file system methods (`fs/read_text_file`, `fs/write_text_file`), confined to
a session's working directory: a path must be absolute and, with every symlink resolved, lie
inside the resolved cwd (no `..`, no symlink escape). Nothing here touches a session."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from corral_server.providers.acp_wire import AcpError, Json

INVALID_PARAMS = -32602


def confined(cwd: str, raw: Json) -> Path:
    if not isinstance(raw, str) or not raw:
        raise AcpError("path must be a non-empty string", INVALID_PARAMS)
    path = Path(raw)
    if not path.is_absolute():
        raise AcpError(f"path must be absolute: {raw}", INVALID_PARAMS)
    root = Path(cwd).resolve()
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise AcpError(f"path is outside the agent's working directory: {raw}", INVALID_PARAMS)
    return resolved


async def read_text_file(cwd: str, params: Mapping[str, Json]) -> Json:
    path = confined(cwd, params.get("path"))
    line, limit = params.get("line"), params.get("limit")

    def read() -> str:
        # gemini-cli reads a file before it writes it: a missing file reads as empty.
        if not path.exists():
            return ""
        text = path.read_text(encoding="utf-8", errors="replace")
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max(int(line) - 1, 0) if isinstance(line, int) else 0
        end = start + int(limit) if isinstance(limit, int) else len(lines)
        return "".join(lines[start:end])

    try:
        return {"content": await asyncio.to_thread(read)}
    except OSError as exc:
        raise AcpError(f"cannot read {path}: {exc}") from exc


async def write_text_file(cwd: str, params: Mapping[str, Json]) -> Json:
    path = confined(cwd, params.get("path"))
    content = params.get("content")
    if not isinstance(content, str):
        raise AcpError("content must be a string", INVALID_PARAMS)

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")

    try:
        await asyncio.to_thread(write)
    except OSError as exc:
        raise AcpError(f"cannot write {path}: {exc}") from exc
    return None

"""The ACP client's file system methods (`fs/read_text_file`, `fs/write_text_file`): their
parameters checked and handed to the session's FileSandbox (sandbox.py), which confines them
to the session's working directory; its refusals become JSON-RPC errors the agent reads.
Nothing here touches a session."""

from __future__ import annotations

from collections.abc import Mapping

from corral_server.domain.timeline import JsonValue
from corral_server.providers.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from corral_server.providers.sandbox import FileSandbox, SandboxError


def _path(raw: JsonValue) -> str:
    if not isinstance(raw, str) or not raw:
        raise RpcError("path must be a non-empty string", INVALID_PARAMS)
    return raw


def _positive(params: Mapping[str, JsonValue], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RpcError(f"{name} must be a positive integer", INVALID_PARAMS)
    return value


def _error(exc: SandboxError) -> RpcError:
    return RpcError(str(exc), INVALID_PARAMS if exc.refused else INTERNAL_ERROR)


async def read_text_file(files: FileSandbox, params: Mapping[str, JsonValue]) -> JsonValue:
    path = _path(params.get("path"))
    line, limit = _positive(params, "line"), _positive(params, "limit")
    try:
        # gemini-cli reads a file before it writes it: a missing file reads as empty.
        return {"content": await files.read_text(path, line, limit)}
    except SandboxError as exc:
        raise _error(exc) from None
    except OSError as exc:
        raise RpcError(f"cannot read {path}: {exc}") from exc


async def write_text_file(files: FileSandbox, params: Mapping[str, JsonValue]) -> JsonValue:
    path = _path(params.get("path"))
    content = params.get("content")
    if not isinstance(content, str):
        raise RpcError("content must be a string", INVALID_PARAMS)
    try:
        await files.write_text(path, content)
    except SandboxError as exc:
        raise _error(exc) from None
    except OSError as exc:
        raise RpcError(f"cannot write {path}: {exc}") from exc
    return None

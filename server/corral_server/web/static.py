"""The dashboard's files, served read-only from one directory (web/static/ in the package).

`/` is index.html; a path without a file extension that names no file is index.html too (the
page's own routes); anything else must be a regular file inside the directory: no listing, no
`..`, no symlink out of it. Text files are gzipped when the client accepts it (a `NAME.gz`
beside the file is used as it is; otherwise the file is compressed once and kept, bounded).
Files are read in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import gzip
import mimetypes
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

STATIC_DIR = Path(__file__).parent / "static"
NOT_BUILT = (
    "<!doctype html><meta charset=utf-8><title>corral</title>"
    "<p>The corral dashboard is not built in this installation "
    "(server/corral_server/web/static/index.html is missing). The API is served here all "
    "the same: Connect and gRPC-Web on POST /corral.v1.Service/Method.</p>"
)
# Types mimetypes may not know, or knows differently on some systems.
_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".json": "application/json",
    ".webmanifest": "application/manifest+json",
    ".svg": "image/svg+xml",
    ".wasm": "application/wasm",
    ".map": "application/json",
    ".txt": "text/plain",
    ".ico": "image/x-icon",
    ".png": "image/png",
    ".woff2": "font/woff2",
}
_COMPRESSIBLE = ("text/", "application/json", "application/manifest+json", "image/svg+xml")
MAX_FILE_BYTES = 32 * 1024 * 1024
CACHE_BYTES = 16 * 1024 * 1024  # gzipped copies kept
_SECURITY = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


def content_type(path: Path) -> str:
    kind = _TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0]
    kind = kind or "application/octet-stream"
    return f"{kind}; charset=utf-8" if kind.startswith("text/") else kind


@dataclass(frozen=True, slots=True)
class _File:
    body: bytes
    kind: str
    etag: str
    gzipped: bool


class StaticFiles:
    def __init__(self, root: Path = STATIC_DIR) -> None:
        self.root = root
        self._gzipped: OrderedDict[tuple[Path, str], bytes] = OrderedDict()
        self._cached = 0

    def resolve(self, url_path: str) -> Path | None:
        """The file a URL path names inside the root, or None (outside it, or no file)."""
        relative = unquote(url_path).lstrip("/")
        if "\x00" in relative or "\\" in relative:
            return None
        parts = [p for p in relative.split("/") if p]
        if any(p in (".", "..") or p.startswith(".") for p in parts):
            return None
        root = self.root.resolve()
        candidate = (root / Path(*parts)).resolve() if parts else root / "index.html"
        if not candidate.is_relative_to(root):
            return None
        if candidate.is_file():
            return candidate
        if not parts or "." not in parts[-1]:
            index = root / "index.html"
            return index if index.is_file() else None
        return None

    def _load(self, url_path: str, gzip_ok: bool) -> _File | None:
        path = self.resolve(url_path)
        if path is None:
            return None
        stat = path.stat()
        if stat.st_size > MAX_FILE_BYTES:
            return None
        etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
        kind = content_type(path)
        if gzip_ok and kind.startswith(_COMPRESSIBLE):
            return _File(self._gzip(path, etag), kind, etag, True)
        return _File(path.read_bytes(), kind, etag, False)

    def _gzip(self, path: Path, etag: str) -> bytes:
        key = (path, etag)
        if key in self._gzipped:
            self._gzipped.move_to_end(key)
            return self._gzipped[key]
        beside = path.with_name(path.name + ".gz")
        body = beside.read_bytes() if beside.is_file() else gzip.compress(path.read_bytes(), 9)
        self._gzipped[key] = body
        self._cached += len(body)
        while self._cached > CACHE_BYTES and len(self._gzipped) > 1:
            _, dropped = self._gzipped.popitem(last=False)
            self._cached -= len(dropped)
        return body

    async def serve(self, url_path: str, verb: str, headers: dict[str, str], send: Send) -> None:
        gzip_ok = "gzip" in headers.get("accept-encoding", "").lower()
        found = await asyncio.to_thread(self._load, url_path, gzip_ok)
        if found is None:
            index_missing = not (self.root / "index.html").is_file()
            if index_missing and url_path in ("/", "/index.html"):
                await _answer(send, 200, NOT_BUILT.encode(), "text/html; charset=utf-8", [], verb)
            else:
                await _answer(send, 404, b"not found\n", "text/plain; charset=utf-8", [], verb)
            return
        extra = [(b"etag", found.etag.encode()), (b"cache-control", b"no-cache")]
        extra.append((b"vary", b"Accept-Encoding"))
        if headers.get("if-none-match") == found.etag:
            await _answer(send, 304, b"", found.kind, extra, "HEAD")
            return
        if found.gzipped:
            extra.append((b"content-encoding", b"gzip"))
        await _answer(send, 200, found.body, found.kind, extra, verb)


async def _answer(
    send: Send,
    status: int,
    body: bytes,
    kind: str,
    extra: list[tuple[bytes, bytes]],
    verb: str,
) -> None:
    headers = [
        (b"content-type", kind.encode()),
        (b"content-length", str(len(body)).encode()),
        *_SECURITY,
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if verb == "HEAD" else body})

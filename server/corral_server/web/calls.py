"""The web calls in flight: at most so many per client address and in total, and for each the
digest of the bearer token it was opened with, so a revoked token can cut its open streams.

Browsers speak HTTP/1.1 to the web port, one call per connection at a time, so a call here is
what an HTTP/2 stream is to the gRPC server's `max_streams_per_connection`; the caps bound what
one address (and everyone together) can pin: subscriptions, WaitForIdle polls, turn streams.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from corral_server.rpc.auth import TOKEN_REVOKED, unauthenticated
from corral_server.web.context import WebStatus

# Defaults of `Config.web_max_calls_per_client` and `web_max_calls`: a dashboard holds one
# Subscribe and a few short calls; 64 covers several people's tabs behind one address.
MAX_CALLS_PER_CLIENT = 64
MAX_CALLS = 1_024


@dataclass(slots=True)
class OpenCall:
    client: str
    # sha256 of the presented bearer token (never the token itself), or None without tokens.
    token_digest: bytes | None
    task: asyncio.Task[None] | None = None
    # Set by `cut`: the status the cut call ends with.
    cut_status: WebStatus | None = None


def token_digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class OpenCalls:
    def __init__(self, per_client: int = MAX_CALLS_PER_CLIENT, total: int = MAX_CALLS) -> None:
        self.per_client = per_client
        self.total = total
        self._by_client: Counter[str] = Counter()
        self._open: dict[int, OpenCall] = {}

    def __len__(self) -> int:
        return len(self._open)

    def refusal(self, client: str) -> str:
        """Why a new call from `client` would go past a cap, or ""."""
        if len(self._open) >= self.total:
            return f"the web port already serves its limit of {self.total} calls"
        if self._by_client[client] >= self.per_client:
            return f"this client address already holds its limit of {self.per_client} web calls"
        return ""

    def add(self, call: OpenCall) -> int:
        key = id(call)
        self._open[key] = call
        self._by_client[call.client] += 1
        return key

    def remove(self, key: int) -> None:
        call = self._open.pop(key, None)
        if call is None:
            return
        self._by_client[call.client] -= 1
        if self._by_client[call.client] <= 0:
            del self._by_client[call.client]

    def cut(self, still_valid: Callable[[bytes], bool], status: WebStatus | None = None) -> int:
        """End every open call whose token digest `still_valid` rejects (a reloaded token
        file that dropped it) with `status` (default UNAUTHENTICATED, TOKEN_REVOKED, as
        gRPC's calls end); the number cut. Calls without a token are left alone."""
        if status is None:
            refusal = unauthenticated(TOKEN_REVOKED)
            status = WebStatus.from_grpc(refusal.code, refusal.details, refusal.trailing_metadata)
        cut = 0
        for call in list(self._open.values()):
            if call.token_digest is None or still_valid(call.token_digest):
                continue
            if call.task is not None and not call.task.done():
                call.cut_status = status
                call.task.cancel()
                cut += 1
        return cut

"""What a servicer sees of a web call: a stand-in for grpc.aio's ServicerContext.

The servicers report errors by `await context.abort(code, details, trailing_metadata)`
(rpc/errors.py builds the google.rpc.Status into `grpc-status-details-bin`); here the abort
raises `WebAbort`, a grpc.aio.AbortError, so the servicers' own error wrappers let it pass
exactly as they do on the gRPC server, and the web edge answers with the captured status.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc

from corral_server import errors
from corral_server.rpc.errors import to_status

DETAILS_KEY = "grpc-status-details-bin"


@dataclass(frozen=True, slots=True)
class WebStatus:
    """A call's error: its code, message, and serialized google.rpc.Status (or None)."""

    code: grpc.StatusCode
    message: str
    details: bytes | None = None

    @classmethod
    def of(cls, error: errors.CorralError) -> WebStatus:
        """The status the gRPC edge gives `error` (same code, message and details)."""
        status = to_status(error)
        return cls.from_grpc(status.code, status.details, status.trailing_metadata)

    @classmethod
    def from_grpc(
        cls, code: grpc.StatusCode, message: str | None, trailing: Sequence[Any] | None
    ) -> WebStatus:
        details = None
        for key, value in trailing or ():
            if key == DETAILS_KEY:
                details = value if isinstance(value, bytes) else str(value).encode()
        return cls(code, message or "", details)


class WebAbort(grpc.aio.AbortError):
    """Raised by `WebContext.abort`; carries the status the call ends with."""

    def __init__(self, status: WebStatus) -> None:
        super().__init__(status.message)
        self.status = status


class WebCallError(Exception):
    """A web call refused before its servicer runs (bad body, limits, access)."""

    def __init__(self, status: WebStatus) -> None:
        super().__init__(status.message)
        self.status = status

    @classmethod
    def of(cls, error: errors.CorralError) -> WebCallError:
        return cls(WebStatus.of(error))


class WebContext:
    """The part of grpc.aio.ServicerContext the corral servicers use, for one web call."""

    def __init__(
        self,
        metadata: tuple[tuple[str, str], ...],
        peer: str,
        deadline: float | None,
        authorization: str = "",
    ) -> None:
        self._metadata = metadata
        # Kept out of the metadata the servicers see; a call forwarded to its agent's owner
        # carries it (rpc/forward_relay.py), since the owner checks the token again.
        self.authorization = authorization
        self._peer = peer
        self._deadline = deadline  # time.monotonic() seconds, or None
        self._cancelled = False
        self.code: grpc.StatusCode | None = None
        self.details: str | None = None

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[Any] = (),
    ) -> NoReturn:
        raise WebAbort(WebStatus.from_grpc(code, details, trailing_metadata))

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

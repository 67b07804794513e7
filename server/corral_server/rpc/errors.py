"""One table from domain exceptions to gRPC status + google.rpc details, and the decorator
that applies it to every handler.

grpc.aio contexts have no `abort_with_status`, so the status is built with
`grpc_status.rpc_status.to_status` and aborted with its code, message and trailing metadata.
Unknown exceptions become INTERNAL with the traceback logged, never a hung stream.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar, cast

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from corral_server import errors
from corral_server.store.errors import StoreError

log = logging.getLogger(__name__)

ERROR_DOMAIN = "corral.dev"


class ClientGone(logging.Filter):
    """grpc.aio logs "ExecuteBatchError raised in core by servicer method [...]" at ERROR with
    a traceback whenever it cannot send an answer because the client has gone: it hung up,
    its deadline passed, or it refused the message as too big for its receive limit. That is
    the client's doing, not a fault of the daemon: such a record becomes one INFO line
    without the traceback: a hang-up is the client's choice, not a daemon fault."""

    MARKER = "ExecuteBatchError raised in core"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not str(record.msg).startswith(self.MARKER):
            return True
        text = record.getMessage()  # "... servicer method [/corral.v1.Service/Method]"
        method = text[text.find("[") + 1 : text.rfind("]")] if "[" in text else "?"
        record.msg, record.args = "client gone before its answer to %s was sent", (method,)
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.exc_info, record.exc_text = None, None
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


# grpc.aio's server logs through this logger.
GRPC_SERVER_LOGGER = "grpc._cython.cygrpc"


def install_client_gone() -> None:
    """Put `ClientGone` on grpc's server logger, once per process. Called where a server is
    built (rpc/server.py, rpc/standby.py), not on import: importing a module changes nothing."""
    logger = logging.getLogger(GRPC_SERVER_LOGGER)
    if not any(isinstance(f, ClientGone) for f in logger.filters):
        logger.addFilter(ClientGone())


# Most specific class first: the first isinstance match wins.
_CODES: tuple[tuple[type[errors.CorralError], grpc.StatusCode], ...] = (
    (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.UnknownProvider, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Unimplemented, grpc.StatusCode.UNIMPLEMENTED),
    (errors.ProviderTimeout, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.ShuttingDown, grpc.StatusCode.UNAVAILABLE),
    (errors.Standby, grpc.StatusCode.UNAVAILABLE),
    (errors.AgentOwnedElsewhere, grpc.StatusCode.UNAVAILABLE),
    (errors.ClusterUnavailable, grpc.StatusCode.UNAVAILABLE),
    # The durable store could not write (a full disk): nothing of the call was kept; retry.
    (StoreError, grpc.StatusCode.UNAVAILABLE),
)


def status_code_for(error: errors.CorralError) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


# Error answers never echo unbounded input: grpc clients refuse trailers past 8 KiB by default
# and would then see RESOURCE_EXHAUSTED instead of the real status. Budget, in UTF-8 bytes:
# the message <= 512 (percent-encoded on the wire: up to 3x), the details <= ~3 KB (base64).
MAX_MESSAGE_BYTES = 512
MAX_ENTRIES = 8  # metadata entries, and field violations
MAX_KEY_BYTES = 64
MAX_VALUE_BYTES = 128


def clip(text: str, limit: int = MAX_VALUE_BYTES) -> str:
    """`text` cut to at most `limit` UTF-8 bytes, saying how long it was."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - 24].decode(errors="ignore") + f"... ({len(raw)} bytes)"


def to_status(error: errors.CorralError) -> grpc.Status:
    code = status_code_for(error)
    entries = list(error.metadata.items())[:MAX_ENTRIES]
    metadata = {clip(k, MAX_KEY_BYTES): clip(v) for k, v in entries}
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=metadata)
    details = [_pack(info)]
    if error.violations:
        shown = error.violations[:MAX_ENTRIES]
        violations = [
            error_details_pb2.BadRequest.FieldViolation(
                field=clip(v.field, MAX_KEY_BYTES), description=clip(v.description)
            )
            for v in shown
        ]
        if len(error.violations) > len(shown):
            more = len(error.violations) - len(shown)
            violations.append(
                error_details_pb2.BadRequest.FieldViolation(description=f"and {more} more")
            )
        details.append(_pack(error_details_pb2.BadRequest(field_violations=violations)))
    message = clip(error.message, MAX_MESSAGE_BYTES)
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=details)
    return rpc_status.to_status(status)


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: errors.CorralError) -> NoReturn:
    status = to_status(error)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable: context.abort raises")


async def refuse(context: grpc.aio.ServicerContext[Any, Any], error: errors.CorralError) -> None:
    """Answer the call with `error`'s status, and return: the handler returns right after,
    and grpc raises its abort again from its own frames. Raised from here, the abort's
    traceback would hold the handler's frames (the request) and grpc keeps the exception on
    the call, which those frames reach through the context: a reference cycle that kept
    each refused request alive until the collector got to it (with the daemon's tuned
    thresholds, very late: 20 refused 5 MB requests held 2.2 GB)."""
    status = to_status(error)
    try:
        await context.abort(status.code, status.details, status.trailing_metadata)
    except grpc.aio.AbortError as aborted:
        if type(aborted) is not grpc.aio.AbortError:
            raise  # another edge's context (web/): its caller answers from the exception
        aborted.__traceback__ = None


def _untraced(error: errors.CorralError) -> errors.CorralError:
    """`error` without its traceback, to be answered after its `except` block: kept in the
    frame that caught it, the traceback (which holds that frame) would make a cycle."""
    error.__traceback__ = None
    return error


async def _abort_internal(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException) -> None:
    log.exception("internal error in handler", exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}")


Req = TypeVar("Req")
Resp = TypeVar("Resp")
Self_ = TypeVar("Self_")

# A servicer's context as the servicers see it: they only hand it on to the decorators below,
# which abort through it, so the request and response types it is generic in never matter.
Ctx = grpc.aio.ServicerContext[Any, Any]

Unary = Callable[[Self_, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]]
Streaming = Callable[[Self_, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]]


def unary(fn: Unary[Self_, Req, Resp]) -> Unary[Self_, Req, Resp]:
    """Map domain errors of a unary handler to statuses."""

    @functools.wraps(fn)
    async def wrapper(
        self: Self_, request: Req, context: grpc.aio.ServicerContext[Req, Resp]
    ) -> Resp:
        try:
            return await fn(self, request, context)
        except errors.CorralError as error:
            refused = _untraced(error)
        except (grpc.aio.AbortError, grpc.aio.UsageError):
            raise
        except Exception as exc:  # every unknown error answers INTERNAL, never hangs
            await _abort_internal(context, exc)
            raise
        del request  # what a refusal holds until it is answered: not the request
        await refuse(context, refused)
        return cast("Resp", None)  # never sent: grpc raises the abort first

    return wrapper


def streaming(fn: Streaming[Self_, Req, Resp]) -> Streaming[Self_, Req, Resp]:
    """Map domain errors of a server-streaming handler to statuses."""

    @functools.wraps(fn)
    async def wrapper(
        self: Self_, request: Req, context: grpc.aio.ServicerContext[Req, Resp]
    ) -> AsyncIterator[Resp]:
        try:
            async for item in fn(self, request, context):
                yield item
            return
        except errors.CorralError as error:
            refused = _untraced(error)
        except (grpc.aio.AbortError, grpc.aio.UsageError):
            raise
        except Exception as exc:
            await _abort_internal(context, exc)
            raise
        del request
        await refuse(context, refused)

    return wrapper

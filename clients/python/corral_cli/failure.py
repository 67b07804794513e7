"""How a failed RPC is shown to the user and which exit code it gives.

The message is `error: <CODE>: <message>`, then the google.rpc details the daemon attached
(ErrorInfo reason, BadRequest field violations), then a hint when the daemon looks absent.

Must not: retry, or swallow an error it does not understand (unknown details are skipped, the
code and message are always printed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

# Exit codes, shared by every command.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_REQUEST = 2
EXIT_REFUSED = 3
EXIT_TIMEOUT = 4
EXIT_INTERRUPTED = 130
# The reader of stdout went away (`corral logs ID | head`): what a shell reports for a program
# SIGPIPE ended (128 + 13), as for `git log | head`; the CLI ends quietly instead of dying.
EXIT_PIPE_CLOSED = 141


def interrupted(error: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, or an error raised while one was being handled. grpc's
    blocking stream iterator, interrupted inside its condition's wait, can end with
    "cannot release un-acquired lock" instead, the KeyboardInterrupt as its context."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__context__
    return False


# The caller asked for something that cannot be done as asked: retrying will not help.
_BAD_REQUEST_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
    }
)


@dataclass(frozen=True)
class Failure:
    code: grpc.StatusCode
    message: str
    reason: str
    # (field, description) pairs from BadRequest.
    violations: tuple[tuple[str, str], ...]
    # ErrorInfo's metadata (e.g. agent_id), for a hint that names the thing.
    metadata: tuple[tuple[str, str], ...] = ()

    @property
    def exit_code(self) -> int:
        return EXIT_BAD_REQUEST if self.code in _BAD_REQUEST_CODES else EXIT_FAILED


def decode(error: grpc.RpcError) -> Failure:
    """The status code, message and google.rpc details of a failed call."""
    code: grpc.StatusCode = getattr(error, "code", lambda: grpc.StatusCode.UNKNOWN)()
    message: str = getattr(error, "details", lambda: "")() or ""
    reason = ""
    metadata: tuple[tuple[str, str], ...] = ()
    violations: list[tuple[str, str]] = []
    try:
        status = rpc_status.from_call(cast(grpc.Call, error))  # every RpcError we see is one
    except ValueError:  # status trailers that contradict the call's code: keep code + message
        status = None
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
            metadata = tuple(sorted(info.metadata.items()))
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend((v.field, v.description) for v in bad.field_violations)
    return Failure(code, message, reason, tuple(violations), metadata)


def describe(failure: Failure, addr: str) -> list[str]:
    """The lines to print on stderr for a failed call to the daemon at `addr`. Each thing is
    said once: a reason that only repeats the code, or a field violation the message already
    states, is left out."""
    message = failure.message
    if failure.reason == "AGENT_BUSY":  # the API's advice; the hint gives the CLI's flags
        message = message.split("; send with if_running=")[0]
    lines = [f"error: {failure.code.name}: {message}"]
    if failure.reason and failure.reason != failure.code.name:
        lines.append(f"  reason: {failure.reason}")
    lines.extend(
        f"  field {field}: {description}"
        for field, description in failure.violations
        if not _already_said(failure.message, field, description)
    )
    hint = _hint(failure, addr)
    if hint:
        lines.append(f"hint: {hint}")
    return lines


def _hint(failure: Failure, addr: str) -> str:
    if failure.reason == "AGENT_BUSY":
        agent = dict(failure.metadata).get("agent_id", "AGENT")
        return (
            "send again with --queue (after the running turn), --steer (into it) or --replace "
            f"(cancel it, run this), or stop it first: corral cancel {agent}"
        )
    if failure.code is grpc.StatusCode.UNAVAILABLE:
        if failure.reason == "SHUTTING_DOWN":
            # The daemon answered: it is there, and is going away (its message says so).
            return f"the daemon at {addr} is draining; retry once it is back, or use another one"
        return (
            f"the corral daemon may not be running at {addr}; start one with "
            "`corral serve` (or buildscripts/serve), or point --addr / CORRAL_ADDR at it "
            "(if it speaks TLS, pass --tls-ca, and --tls-cert/--tls-key for mutual TLS)"
        )
    if failure.code is grpc.StatusCode.UNAUTHENTICATED:
        return "the daemon wants a token: pass --token-file FILE or set CORRAL_TOKEN"
    if failure.code is grpc.StatusCode.DEADLINE_EXCEEDED:
        if failure.reason == "PROVIDER_TIMEOUT":
            return "the agent's provider did not answer in time; see `corral ls` for its state"
        return "the daemon did not answer in time; raise --timeout"
    return ""


# How the daemon marks a text it cut to fit an error answer: `...<cut> (N bytes)`.
_CLIPPED = re.compile(r"\.\.\. \(\d+ bytes\)$")


def _already_said(message: str, field: str, description: str) -> bool:
    """The violation is (a clipped copy of) what the message says, e.g. the message
    `content: line 1: unknown directive ...` and the violation (content, `line 1: ...`), or
    the message `unknown provider 'x'; known: a, b` and the violation (provider, `one of a, b`)."""
    said = _CLIPPED.sub("", description)
    if said.startswith("one of ") and said.removeprefix("one of ") in message:
        return True
    return f"{field}: {said}" in message if field else said in message

"""The request that opens a codex session's thread: `thread/fork` of a stored thread before a
turn (ForkAgent: docs/design.md#forks), `thread/resume` of a stored thread, or `thread/start`
of a new one. Pure: no I/O."""

from __future__ import annotations

from typing import cast

from corral_server.providers import codex_protocol as protocol
from corral_server.providers.base import SessionConfig

ThreadParams = protocol.ThreadStartParams | protocol.ThreadResumeParams | protocol.ThreadForkParams


def thread_request(
    config: SessionConfig,
    approval: str,
    sandbox: protocol.SandboxMode,
    fork_before_turn: str,
) -> tuple[str, ThreadParams]:
    if fork_before_turn:
        fork: protocol.ThreadForkParams = {
            "threadId": config.resume_session_id,
            "beforeTurnId": fork_before_turn,
            "cwd": config.cwd,
            "approvalPolicy": approval,
            "sandbox": sandbox,
            "excludeTurns": True,  # only its id is read: the turns are corral's rows already
        }
        return "thread/fork", fork
    start: protocol.ThreadStartParams = {
        "cwd": config.cwd,
        "approvalPolicy": approval,
        "sandbox": sandbox,
    }
    if config.model:
        start["model"] = config.model
    if not config.resume_session_id:
        return "thread/start", start
    # thread/resume takes the same settings, and the thread to resume.
    resume: protocol.ThreadResumeParams = {"threadId": config.resume_session_id}
    resume.update(cast(protocol.ThreadResumeParams, start))
    return "thread/resume", resume

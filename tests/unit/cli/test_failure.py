"""How a failed call is worded (corral_cli.failure): each thing said once, in the CLI's terms."""

from __future__ import annotations

import grpc

from corral_cli import failure
from corral_cli.failure import Failure, describe


def test_a_field_violation_the_message_does_not_state_is_still_printed() -> None:
    violation = ("cwd", "not absolute")
    failed = Failure(grpc.StatusCode.INVALID_ARGUMENT, "bad request", "", (violation,))
    assert describe(failed, "addr") == [
        "error: INVALID_ARGUMENT: bad request",
        "  field cwd: not absolute",
    ]


def test_a_list_of_choices_the_message_already_gives_is_left_out() -> None:
    failed = Failure(
        grpc.StatusCode.INVALID_ARGUMENT,
        "unknown provider 'x'; known: a, b",
        "UNKNOWN_PROVIDER",
        (("provider", "one of a, b"),),
    )
    assert describe(failed, "addr") == [
        "error: INVALID_ARGUMENT: unknown provider 'x'; known: a, b",
        "  reason: UNKNOWN_PROVIDER",
    ]


def test_a_busy_agent_is_told_the_clis_flags_not_the_apis_field() -> None:
    failed = Failure(
        grpc.StatusCode.FAILED_PRECONDITION,
        "agent 'a1' is running turn 't1'; send with if_running=QUEUE, STEER or REPLACE, or "
        "cancel it first",
        "AGENT_BUSY",
        (),
        (("agent_id", "a1"), ("turn_id", "t1")),
    )
    assert describe(failed, "addr") == [
        "error: FAILED_PRECONDITION: agent 'a1' is running turn 't1'",
        "  reason: AGENT_BUSY",
        "hint: send again with --queue (after the running turn), --steer (into it) or --replace "
        "(cancel it, run this), or stop it first: corral cancel a1",
    ]


def _raised_while_handling(first: BaseException, then: BaseException) -> BaseException:
    try:
        try:
            raise first
        except BaseException:
            raise then  # noqa: B904 (the context is the point)
    except BaseException as error:
        return error


def test_ctrl_c_is_told_apart_also_when_grpc_turned_it_into_a_lock_error() -> None:
    # grpc's blocking stream iterator, interrupted in its condition's wait, ends with this
    # RuntimeError, the KeyboardInterrupt as its context (seen in CI on Python 3.11).
    lock = _raised_while_handling(
        KeyboardInterrupt(), RuntimeError("cannot release un-acquired lock")
    )
    assert failure.interrupted(KeyboardInterrupt())
    assert failure.interrupted(lock)
    assert not failure.interrupted(RuntimeError("cannot release un-acquired lock"))
    assert not failure.interrupted(_raised_while_handling(ValueError(), RuntimeError("x")))

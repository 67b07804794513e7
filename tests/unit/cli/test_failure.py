"""How a failed call is worded (corral_cli.failure): each thing said once, in the CLI's terms."""

from __future__ import annotations

import grpc

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

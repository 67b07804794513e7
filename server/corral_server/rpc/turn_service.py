"""corral.v1.TurnService: prompts, streamed turns and cancels."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, assert_never

from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import Usage
from corral_server.domain.timeline import TimelineRow
from corral_server.manager.manager import AgentManager
from corral_server.manager.turns import (
    CancelOutcome,
    Disposition,
    IfRunning,
    TurnUpdate,
    WaitStatus,
)
from corral_server.rpc import convert
from corral_server.rpc.errors import streaming, unary

Ctx = Any

_IF_RUNNING = {
    turn_pb.IF_RUNNING_UNSPECIFIED: IfRunning.REJECT,
    turn_pb.IF_RUNNING_REJECT: IfRunning.REJECT,
    turn_pb.IF_RUNNING_QUEUE: IfRunning.QUEUE,
    turn_pb.IF_RUNNING_STEER: IfRunning.STEER,
    turn_pb.IF_RUNNING_REPLACE: IfRunning.REPLACE,
}
_DISPOSITION = {
    Disposition.STARTED: turn_pb.PROMPT_DISPOSITION_STARTED,
    Disposition.QUEUED: turn_pb.PROMPT_DISPOSITION_QUEUED,
    Disposition.STEERED: turn_pb.PROMPT_DISPOSITION_STEERED,
    Disposition.REPLACED: turn_pb.PROMPT_DISPOSITION_REPLACED,
}
_WAIT_STATUS = {
    WaitStatus.IDLE: turn_pb.WAIT_STATUS_IDLE,
    WaitStatus.ERROR: turn_pb.WAIT_STATUS_ERROR,
    WaitStatus.PERMISSION: turn_pb.WAIT_STATUS_PERMISSION,
    WaitStatus.TIMEOUT: turn_pb.WAIT_STATUS_TIMEOUT,
}
_OUTCOME = {
    CancelOutcome.NOT_RUNNING: turn_pb.CANCEL_OUTCOME_NOT_RUNNING,
    CancelOutcome.SETTLED: turn_pb.CANCEL_OUTCOME_SETTLED,
    CancelOutcome.REFUSED: turn_pb.CANCEL_OUTCOME_REFUSED,
}


def _if_running(value: int) -> IfRunning:
    try:
        return _IF_RUNNING[value]  # type: ignore[index]
    except KeyError:
        raise errors.InvalidArgument.field("if_running", f"unknown value {value}") from None


def update_to_pb(update: TurnUpdate) -> turn_pb.StreamTurnResponse:
    R = turn_pb.StreamTurnResponse
    match update:
        case ev.TurnStarted():
            return R(turn_started=convert.turn_started_pb(update))
        case TimelineRow():
            return R(row=convert.row_to_pb(update))
        case Usage():
            return R(usage=convert.usage_to_pb(update))
        case ev.TurnCompleted():
            return R(turn_completed=convert.turn_completed_pb(update))
        case ev.TurnFailed():
            return R(turn_failed=convert.turn_failed_pb(update))
        case ev.TurnCanceled():
            return R(turn_canceled=convert.turn_canceled_pb(update))
        case _:
            assert_never(update)


class TurnService(turn_grpc.TurnServiceServicer):
    def __init__(self, manager: AgentManager) -> None:
        self._manager = manager

    @unary
    async def SendPrompt(
        self, request: turn_pb.SendPromptRequest, context: Ctx
    ) -> turn_pb.SendPromptResponse:
        started = await self._manager.send_prompt(
            request.agent_id,
            convert.prompt_from_pb(list(request.content)),
            request.client_message_id,
            _if_running(request.if_running),
        )
        return turn_pb.SendPromptResponse(
            disposition=_DISPOSITION[started.disposition], turn_id=started.turn_id
        )

    @streaming
    async def StreamTurn(
        self, request: turn_pb.StreamTurnRequest, context: Ctx
    ) -> AsyncIterator[turn_pb.StreamTurnResponse]:
        updates = await self._manager.stream_turn(
            request.agent_id,
            convert.prompt_from_pb(list(request.content)),
            request.client_message_id,
            _if_running(request.if_running),
        )
        async for update in updates:
            yield update_to_pb(update)

    @unary
    async def CancelTurn(
        self, request: turn_pb.CancelTurnRequest, context: Ctx
    ) -> turn_pb.CancelTurnResponse:
        outcome, agent = await self._manager.cancel(request.agent_id)
        return turn_pb.CancelTurnResponse(
            outcome=_OUTCOME[outcome], agent=convert.agent_to_pb(agent)
        )

    @unary
    async def RespondToPermission(
        self, request: turn_pb.RespondToPermissionRequest, context: Ctx
    ) -> turn_pb.RespondToPermissionResponse:
        raise errors.Unimplemented(
            "RespondToPermission needs the permissions capability, not yet delivered"
        )

    @unary
    async def WaitForIdle(
        self, request: turn_pb.WaitForIdleRequest, context: Ctx
    ) -> turn_pb.WaitForIdleResponse:
        timeout_s = None
        if request.HasField("timeout"):
            timeout = request.timeout
            if timeout.seconds < 0 or timeout.nanos < 0 or timeout.nanos > 999_999_999:
                raise errors.InvalidArgument.field("timeout", "must be a non-negative duration")
            timeout_s = timeout.seconds + timeout.nanos / 1e9
        status, agent = await self._manager.wait_for_idle(request.agent_id, timeout_s)
        return turn_pb.WaitForIdleResponse(
            status=_WAIT_STATUS[status], agent=convert.agent_to_pb(agent)
        )

    @unary
    async def Rewind(self, request: turn_pb.RewindRequest, context: Ctx) -> turn_pb.RewindResponse:
        raise errors.Unimplemented(
            "Rewind needs echo reconciliation and re-basing, not yet delivered"
        )

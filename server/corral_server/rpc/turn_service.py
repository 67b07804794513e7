"""corral.v1.TurnService: prompts, streamed turns and cancels."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral_server import errors
from corral_server.hub import EventHub
from corral_server.manager.manager import AgentManager
from corral_server.manager.turns import (
    CancelOutcome,
    Disposition,
    IfRunning,
    StartedTurn,
    WaitStatus,
)
from corral_server.rpc import convert
from corral_server.rpc.bounds import check_content, check_string
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


def turn_responses(batch: bytes, turn_id: str) -> Iterator[turn_pb.StreamTurnResponse]:
    """The StreamTurn responses for turn `turn_id` in one Subscribe batch (a serialized
    SubscribeResponse of one agent's events), in order; the terminal is the last one.
    Raises ShuttingDown when the hub ended the stream, SubscriberLagged when it reset it."""
    R = turn_pb.StreamTurnResponse
    for event in event_pb.SubscribeResponse.FromString(batch).events:
        match event.WhichOneof("payload"):
            case "turn_started" if event.turn_started.turn_id == turn_id:
                yield R(turn_started=event.turn_started)
            case "timeline_row_appended" if event.timeline_row_appended.row.turn_id == turn_id:
                yield R(row=event.timeline_row_appended.row)
            case "turn_completed" if event.turn_completed.turn_id == turn_id:
                if event.turn_completed.HasField("usage"):
                    yield R(usage=event.turn_completed.usage)
                yield R(turn_completed=event.turn_completed)
            case "turn_failed" if event.turn_failed.turn_id == turn_id:
                yield R(turn_failed=event.turn_failed)
            case "turn_canceled" if event.turn_canceled.turn_id == turn_id:
                yield R(turn_canceled=event.turn_canceled)
            case "stream_ending":
                raise errors.ShuttingDown()
            case "subscription_reset":
                raise errors.SubscriberLagged(
                    "this StreamTurn fell too far behind its turn; read the rest with "
                    "FetchTimeline (the turn goes on)"
                )
            case _:
                pass  # other turns, other events of the agent, `synced`


_TERMINALS = ("turn_completed", "turn_failed", "turn_canceled")


class TurnService(turn_grpc.TurnServiceServicer):
    def __init__(self, manager: AgentManager, hub: EventHub) -> None:
        self._manager = manager
        self._hub = hub

    @unary
    async def SendPrompt(
        self, request: turn_pb.SendPromptRequest, context: Ctx
    ) -> turn_pb.SendPromptResponse:
        started = await self._start(request)
        return turn_pb.SendPromptResponse(
            disposition=_DISPOSITION[started.disposition], turn_id=started.turn_id
        )

    @streaming
    async def StreamTurn(
        self, request: turn_pb.StreamTurnRequest, context: Ctx
    ) -> AsyncIterator[turn_pb.StreamTurnResponse]:
        """The turn's events come from the hub, like every Subscribe: one fan-out path, one
        bound per subscriber. The subscription starts at the current head, before the turn,
        so the turn's first event is already in it."""
        self._manager.get(request.agent_id)  # a known agent, before any subscription
        hub = self._hub
        subscription = hub.subscribe(
            frozenset((request.agent_id,)), hub.head_revision, self._manager.snapshot
        )
        async with subscription:
            started = await self._start(request)
            async for batch in subscription:
                for response in turn_responses(batch, started.turn_id):
                    yield response
                    if response.WhichOneof("event") in _TERMINALS:
                        return

    async def _start(
        self, request: turn_pb.SendPromptRequest | turn_pb.StreamTurnRequest
    ) -> StartedTurn:
        limits = self._manager.limits
        check_content(request.content, limits)
        check_string(request.client_message_id, limits.max_id_chars, "client_message_id")
        return await self._manager.send_prompt(
            request.agent_id,
            convert.prompt_from_pb(list(request.content)),
            request.client_message_id,
            _if_running(request.if_running),
        )

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

"""corral.v1.TurnService: prompts, streamed turns and cancels."""

from __future__ import annotations

from collections.abc import AsyncIterator

from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral_server import errors
from corral_server.domain.agent import PermissionResponse
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
from corral_server.rpc.errors import Ctx, streaming, unary
from corral_server.rpc.streams import StreamBook
from corral_server.rpc.turn_follow import TurnFollower

# RespondToPermission: an answer's message and edited tool input stay small.
MAX_PERMISSION_MESSAGE_CHARS = 16_384
MAX_UPDATED_INPUT_BYTES = 1 << 20

# Keyed by plain int: a request may carry a number no enum member has.
_IF_RUNNING: dict[int, IfRunning] = {
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
        return _IF_RUNNING[value]
    except KeyError:
        raise errors.InvalidArgument.field("if_running", f"unknown value {value}") from None


class TurnService(turn_grpc.TurnServiceServicer):
    def __init__(
        self, manager: AgentManager, hub: EventHub, streams: StreamBook | None = None
    ) -> None:
        self._manager = manager
        self._hub = hub
        self._streams = streams or StreamBook()

    @unary
    async def SendPrompt(
        self, request: turn_pb.SendPromptRequest, context: Ctx
    ) -> turn_pb.SendPromptResponse:
        started = await self._start(request)
        return turn_pb.SendPromptResponse(
            disposition=_DISPOSITION[started.disposition],
            turn_id=started.turn_id,
            client_message_id=started.client_message_id,
        )

    @unary
    async def RemoveQueuedPrompt(
        self, request: turn_pb.RemoveQueuedPromptRequest, context: Ctx
    ) -> turn_pb.RemoveQueuedPromptResponse:
        agent = await self._manager.remove_queued(request.agent_id, request.client_message_id)
        return turn_pb.RemoveQueuedPromptResponse(agent=convert.agent_to_pb(agent))

    @unary
    async def GetQueuedPrompt(
        self, request: turn_pb.GetQueuedPromptRequest, context: Ctx
    ) -> turn_pb.GetQueuedPromptResponse:
        queued = self._manager.reads.queued_prompt(request.agent_id, request.client_message_id)
        return turn_pb.GetQueuedPromptResponse(
            prompt=convert.queued_prompt_to_pb(queued, whole=True)
        )

    @unary
    async def GetPendingPermission(
        self, request: turn_pb.GetPendingPermissionRequest, context: Ctx
    ) -> turn_pb.GetPendingPermissionResponse:
        permission = self._manager.reads.pending_permission(request.agent_id, request.request_id)
        return turn_pb.GetPendingPermissionResponse(permission=convert.permission_to_pb(permission))

    @streaming
    async def StreamTurn(
        self, request: turn_pb.StreamTurnRequest, context: Ctx
    ) -> AsyncIterator[turn_pb.StreamTurnResponse]:
        """The turn's events come from the hub, like every Subscribe: one fan-out path, one
        bound per subscriber. The subscription starts at the current head, before the turn,
        so the turn's first event is already in it. Its writes are bounded like a
        Subscribe's (rpc/streams.py); a client that stops reading gets SUBSCRIBER_STALLED
        once it reads again (the turn goes on)."""
        self._manager.get(request.agent_id)  # a known agent, before any subscription
        hub = self._hub
        stream = self._streams.open(lambda: None)
        try:
            subscription = hub.subscribe(
                frozenset((request.agent_id,)), hub.head_revision, self._manager.directory.snapshot
            )
            subscription.batch_bytes = stream.credit
            async with subscription:
                started = await self._start(request)
                follower = TurnFollower(request.agent_id, started)
                for response in follower.opening():
                    yield response
                async for batch in subscription:
                    if await stream.write(len(batch)):
                        for response in follower.responses(batch):
                            yield response
                        subscription.batch_bytes = stream.written(hub.batch_bytes)
                        if follower.done:
                            return
                    if stream.stalled:
                        raise errors.SubscriberStalled(
                            f"this StreamTurn's client did not read for "
                            f"{self._streams.limits.stall_s:g} s; read the rest with "
                            "FetchTimeline (the turn goes on)"
                        )
        finally:
            stream.close()

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
        behavior = convert.BEHAVIOR_FROM_PB.get(request.behavior)
        if behavior is None:
            raise errors.InvalidArgument.field("behavior", "ALLOW or DENY")
        limits = self._manager.limits
        check_string(request.selected_action_id, limits.max_id_chars, "selected_action_id")
        check_string(request.message, MAX_PERMISSION_MESSAGE_CHARS, "message")
        updated = None
        if request.HasField("updated_input"):
            if request.updated_input.ByteSize() > MAX_UPDATED_INPUT_BYTES:
                raise errors.InvalidArgument.field(
                    "updated_input", f"at most {MAX_UPDATED_INPUT_BYTES} bytes"
                )
            updated = convert.struct_to_dict(request.updated_input)
        response = PermissionResponse(
            behavior, request.selected_action_id, request.message, updated
        )
        agent = await self._manager.respond_permission(
            request.agent_id, request.request_id, response
        )
        return turn_pb.RespondToPermissionResponse(agent=convert.agent_to_pb(agent))

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
        agent = await self._manager.rewind(request.agent_id, request.message_id)
        return turn_pb.RewindResponse(agent=convert.agent_to_pb(agent))

"""What a forwarded call carries to the owner and brings back, seen from an owner that records
it (a plain grpc.aio TurnService in the test): the caller's remaining deadline and metadata
(tokens included, binary metadata too, and the node it came through), and the owner's answer
or status unchanged, trailing metadata and details included, for unary and streaming calls,
from the gRPC port and from the web port alike. And which methods are forwarded at all."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import grpc
import httpx2 as httpx
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral_server.rpc.forward_relay import Forwarding
from corral_server.rpc.forwarding import OWNER_READS, forwarded_methods
from corral_server.rpc.roles import READ_METHODS
from corral_server.rpc.server import SERVICE_NAMES, service_descriptor
from tests import conftest
from tests.support.client import error_details
from tests.support.daemon import DaemonThread
from tests.support.web import Stream, Web, WebError, stream_request

AGENT = "a" * 32
OWNER_REASON = "OWNER_SAYS_NO"


def owner_status(code: int, message: str, reason: str) -> grpc.Status:
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="corral.dev"))
    return rpc_status.to_status(status_pb2.Status(code=code, message=message, details=[info]))


@dataclass
class Seen:
    remaining: float | None
    metadata: dict[str, str | bytes]


@dataclass
class RecordingOwner:
    """Answers CancelTurn and StreamTurn as told, and records what each call carried."""

    seen: list[Seen] = field(default_factory=list)
    refuse: grpc.Status | None = None

    def _record(self, context: Any) -> None:
        self.seen.append(Seen(context.time_remaining(), dict(context.invocation_metadata())))

    async def CancelTurn(self, request: Any, context: Any) -> turn_pb.CancelTurnResponse:
        self._record(context)
        if self.refuse is not None:
            extra = (("x-owner", "yes"),)
            await context.abort(
                self.refuse.code, self.refuse.details, (*self.refuse.trailing_metadata, *extra)
            )
        return turn_pb.CancelTurnResponse(outcome=turn_pb.CANCEL_OUTCOME_NOT_RUNNING)

    async def StreamTurn(self, request: Any, context: Any) -> AsyncIterator[Any]:
        self._record(context)
        started = turn_pb.TurnStarted(agent_id=request.agent_id, turn_id="t1")
        yield turn_pb.StreamTurnResponse(turn_started=started)
        yield turn_pb.StreamTurnResponse(turn_completed=turn_pb.TurnCompleted(turn_id="t1"))
        status = owner_status(code_pb2.RESOURCE_EXHAUSTED, "the owner stopped", OWNER_REASON)
        await context.abort(status.code, status.details, status.trailing_metadata)


@dataclass
class Setup:
    owner: RecordingOwner
    b: DaemonThread


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    owner = RecordingOwner()
    server = grpc.aio.server()
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "CancelTurn": grpc.unary_unary_rpc_method_handler(
            owner.CancelTurn,
            request_deserializer=turn_pb.CancelTurnRequest.FromString,
            response_serializer=turn_pb.CancelTurnResponse.SerializeToString,
        ),
        "StreamTurn": grpc.unary_stream_rpc_method_handler(
            owner.StreamTurn,
            request_deserializer=turn_pb.StreamTurnRequest.FromString,
            response_serializer=turn_pb.StreamTurnResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("corral.v1.TurnService", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    addresses = {"owner": f"127.0.0.1:{port}"}
    forwarding = Forwarding("b", {AGENT: "owner"}.get, addresses.get)
    config = replace(conftest.test_config(), forwarding=forwarding, web_listen="127.0.0.1:0")
    b = DaemonThread(config).start()
    try:
        yield Setup(owner, b)
    finally:
        b.stop()
        await server.stop(0)


@pytest.fixture
async def turns(setup: Setup) -> AsyncIterator[turn_grpc.TurnServiceAsyncStub]:
    async with grpc.aio.insecure_channel(setup.b.address) as channel:
        yield turn_grpc.TurnServiceStub(channel)


CANCEL = turn_pb.CancelTurnRequest(agent_id=AGENT)


async def test_the_callers_deadline_and_metadata_reach_the_owner(
    setup: Setup, turns: turn_grpc.TurnServiceAsyncStub
) -> None:
    metadata = (("authorization", "Bearer tok-123"), ("x-trace", "t1"), ("x-blob-bin", b"\0\1"))
    answer = await turns.CancelTurn(CANCEL, timeout=20, metadata=metadata)
    assert answer.outcome == turn_pb.CANCEL_OUTCOME_NOT_RUNNING
    (seen,) = setup.owner.seen
    assert seen.remaining is not None and 10 < seen.remaining <= 20
    assert {k: seen.metadata.get(k) for k in ("authorization", "x-trace", "x-blob-bin")} == dict(
        metadata
    )
    assert seen.metadata["corral-forwarded-from"] == "b"
    await turns.CancelTurn(CANCEL)
    assert setup.owner.seen[1].remaining is None  # no deadline: none added


async def test_the_owners_status_comes_back_unchanged(
    setup: Setup, turns: turn_grpc.TurnServiceAsyncStub
) -> None:
    setup.owner.refuse = owner_status(code_pb2.FAILED_PRECONDITION, "the owner says no", "NO")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await turns.CancelTurn(CANCEL)
    error = caught.value
    assert (error.code(), error.details()) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "the owner says no",
    )
    assert error_details(error).reason == "NO"
    assert dict(error.trailing_metadata() or ())["x-owner"] == "yes"
    # An UNAVAILABLE the owner itself answered (it drains, say) is the owner's, not unreachable.
    setup.owner.refuse = owner_status(code_pb2.UNAVAILABLE, "draining", "SHUTTING_DOWN")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await turns.CancelTurn(CANCEL)
    assert (caught.value.details(), error_details(caught.value).reason) == (
        "draining",
        "SHUTTING_DOWN",
    )


async def test_a_streaming_call_forwards_the_owners_stream_and_its_end(
    setup: Setup, turns: turn_grpc.TurnServiceAsyncStub
) -> None:
    call = turns.StreamTurn(turn_pb.StreamTurnRequest(agent_id=AGENT), timeout=20)
    received = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for message in call:
            received.append(message.WhichOneof("event"))
    assert received == ["turn_started", "turn_completed"]
    assert (caught.value.code(), error_details(caught.value).reason) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        OWNER_REASON,
    )
    assert setup.owner.seen[0].metadata["corral-forwarded-from"] == "b"


async def test_the_web_port_forwards_with_the_callers_token_and_not_its_browser_headers(
    setup: Setup,
) -> None:
    assert setup.b.daemon is not None
    base = f"http://127.0.0.1:{setup.b.daemon.web_port}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        web = Web(client)
        headers: dict[str, Any] = {
            "authorization": "Bearer web-tok",
            "x-trace": "w1",
            "connect-timeout-ms": "20000",
        }
        answer = await web.unary(
            "TurnService/CancelTurn", CANCEL, turn_pb.CancelTurnResponse, **headers
        )
        assert not isinstance(answer, WebError), answer
        assert answer.outcome == turn_pb.CANCEL_OUTCOME_NOT_RUNNING
        setup.owner.refuse = owner_status(code_pb2.FAILED_PRECONDITION, "no from the owner", "NO")
        refused = await web.unary("TurnService/CancelTurn", CANCEL, turn_pb.CancelTurnResponse)
    assert isinstance(refused, WebError)
    assert (refused.code, refused.message, refused.reason) == (
        "failed_precondition",
        "no from the owner",
        "NO",
    )
    seen = setup.owner.seen[0]
    assert (seen.metadata["authorization"], seen.metadata["x-trace"]) == ("Bearer web-tok", "w1")
    assert seen.metadata["corral-forwarded-from"] == "b"
    assert "connect-protocol-version" not in seen.metadata and "host" not in seen.metadata
    assert seen.remaining is not None and 10 < seen.remaining <= 20


# The changing methods that name no single agent at the top of their request: answered by the
# node that receives them (each says why), never forwarded.
NOT_FORWARDED = {
    "/corral.v1.AgentService/ImportAgent": "a new agent, on the receiving node",
    "/corral.v1.AgentService/ImportAgentExport": "a new agent; the request streams",
    "/corral.v1.AgentService/ClearAttention": "many agents: attention is the read model's",
    "/corral.v1.SubagentService/SpawnSubagent": "a new child agent, by its requester's node",
    "/corral.v1.SubagentService/KillSubagentRun": "by run id",
    "/corral.v1.SubagentService/SteerSubagentRun": "by run id",
    "/corral.v1.ScheduleService/PauseSchedule": "by schedule id",
    "/corral.v1.ScheduleService/DeleteSchedule": "by schedule id",
}
FORWARDED = {
    "/corral.v1.AgentService/CreateAgent",  # only to the node its placement names
    "/corral.v1.AgentService/UpdateAgent",
    "/corral.v1.AgentService/ReloadAgent",
    "/corral.v1.AgentService/CloseAgent",
    "/corral.v1.AgentService/ArchiveAgent",
    "/corral.v1.AgentService/DetachAgent",
    "/corral.v1.AgentService/ForkAgent",
    "/corral.v1.TurnService/SendPrompt",
    "/corral.v1.TurnService/StreamTurn",
    "/corral.v1.TurnService/CancelTurn",
    "/corral.v1.TurnService/RespondToPermission",
    "/corral.v1.TurnService/WaitForIdle",
    "/corral.v1.TurnService/Rewind",
    "/corral.v1.TurnService/RemoveQueuedPrompt",
    "/corral.v1.TimelineService/FetchToolOutput",
    "/corral.v1.WorkspaceService/DeleteWorkspace",
    "/corral.v1.WorkspaceService/GetChanges",  # the working tree is on the owner's machine
    "/corral.v1.ScheduleService/CreateSchedule",
    "/corral.v1.ScheduleService/ListSchedules",
}


def every_method() -> set[str]:
    return {
        f"/{name}/{method.name}"
        for name in SERVICE_NAMES
        for method in service_descriptor(name.rpartition(".")[2]).methods
    }


def test_every_changing_method_is_forwarded_or_said_why_not_and_no_read_is() -> None:
    forwarded = set(forwarded_methods())
    assert forwarded == FORWARDED  # a new method: decide here which kind it is
    assert forwarded & READ_METHODS == OWNER_READS
    assert every_method() == READ_METHODS | forwarded | set(NOT_FORWARDED)
    assert {m for m, f in forwarded_methods().items() if f.streaming} == {
        "/corral.v1.TurnService/StreamTurn"
    }


async def test_the_web_port_forwards_a_stream_and_its_end(setup: Setup) -> None:
    assert setup.b.daemon is not None
    base = f"http://127.0.0.1:{setup.b.daemon.web_port}"
    request = stream_request("TurnService/StreamTurn", turn_pb.StreamTurnRequest(agent_id=AGENT))
    async with (
        httpx.AsyncClient(base_url=base, timeout=30) as client,
        client.stream(**request) as response,
    ):
        stream = Stream(response, turn_pb.StreamTurnResponse, json_codec=False)
        kinds = []
        while (message := await stream.read()) is not None:
            kinds.append(message.WhichOneof("event"))
    assert kinds == ["turn_started", "turn_completed"]
    error = stream.error()
    assert error is not None and (error.code, error.reason) == ("resource_exhausted", OWNER_REASON)
    assert setup.owner.seen[0].metadata["corral-forwarded-from"] == "b"

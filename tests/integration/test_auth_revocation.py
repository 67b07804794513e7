"""Revocation cuts open calls, through the wire: a token removed from the token file and
reloaded ends every call still open with it (Subscribe, StreamTurn, WaitForIdle) with
UNAUTHENTICATED / TOKEN_REVOKED at the reload, and nothing that happens after the reload reaches
them; another token's streams go on, and finished calls leave nothing in the registry.

In-process (FakeClock: a `/sleep` turn stays open until the test moves the clock); one test is a
`corral serve` process revoked by SIGHUP, and the web port's streams end the same way.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx2
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests import conftest
from tests.support.client import Stubs, create_request, error_details, next_message, text
from tests.support.daemon import DaemonProcess, DaemonThread
from tests.support.web import Stream, stream_request

KEPT, DROPPED = "kept-token-0123456789", "dropped-token-abcdefgh"
TURN_MS = 60_000


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"{KEPT}\n{DROPPED}\n")
    return path


@pytest.fixture
def secured(token_file: Path) -> Iterator[DaemonThread]:
    daemon = DaemonThread(replace(conftest.test_config(), auth_token_file=token_file)).start()
    yield daemon
    daemon.stop()


async def open_calls(daemon: DaemonThread) -> int:
    """The calls the daemon's token registry holds (read on its loop)."""

    async def count() -> int:
        assert daemon.daemon is not None and daemon.daemon.tokens is not None
        return daemon.daemon.tokens.open_calls

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(count(), daemon.loop))


async def until_open_calls(daemon: DaemonThread, count: int) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while await open_calls(daemon) != count:
        assert asyncio.get_running_loop().time() < deadline, await open_calls(daemon)
        await asyncio.sleep(0.01)


async def revoke(daemon: DaemonThread, token_file: Path) -> None:
    """Drop DROPPED from the file and reload it on the daemon's loop (what SIGHUP does)."""
    await asyncio.to_thread(token_file.write_text, f"{KEPT}\n")

    async def reload() -> None:
        assert daemon.daemon is not None
        daemon.daemon.reload_tokens()

    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(reload(), daemon.loop))


Resp = TypeVar("Resp")
Watch = grpc.aio.UnaryStreamCall[event_pb.SubscribeRequest, event_pb.SubscribeResponse]


async def until_synced(
    watch: Watch,
) -> None:
    while True:
        reply = await next_message(watch)
        if any(e.HasField("synced") for e in reply.events):
            return


async def read_until_refused(call: grpc.aio.UnaryStreamCall[Any, Resp]) -> list[Resp]:
    """Every message `call` still delivers, then the refusal's code and reason (asserted)."""
    seen: list[Resp] = []
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        while True:
            seen.append(await next_message(call))
    details = error_details(refused.value)
    assert (details.code, details.reason) == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_REVOKED")
    return seen


async def create_agent(stubs: Stubs, cwd: Path, token: str) -> str:
    reply = await stubs.agents.CreateAgent(create_request(str(cwd)), metadata=bearer(token))
    return str(reply.agent.id)


async def watch_all(stubs: Stubs, token: str) -> Watch:
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(), metadata=bearer(token))
    await until_synced(watch)
    return watch


async def until_seen(
    watch: Watch,
    agent_id: str,
) -> None:
    """Read `watch` until it told of a finished turn and of the agent `agent_id`."""
    seen_completed = seen_agent = False
    while not (seen_completed and seen_agent):
        reply = await next_message(watch)
        for event in reply.events:
            seen_completed |= event.HasField("turn_completed")
            seen_agent |= event.agent_upserted.agent.id == agent_id


async def test_a_revoked_token_ends_its_streams_and_waits_and_another_tokens_go_on(
    secured: DaemonThread, token_file: Path, tmp_path: Path
) -> None:
    async with grpc.aio.insecure_channel(secured.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = await create_agent(stubs, tmp_path, KEPT)
        dropped_watch = await watch_all(stubs, DROPPED)
        kept_watch = await watch_all(stubs, KEPT)
        request = turn_pb.StreamTurnRequest(
            agent_id=agent_id, content=text(f"/sleep {TURN_MS}", "after the reload")
        )
        turn = stubs.turns.StreamTurn(request, metadata=bearer(DROPPED))
        started = await next_message(turn)
        assert started.HasField("turn_started")
        idle = stubs.turns.WaitForIdle(
            turn_pb.WaitForIdleRequest(agent_id=agent_id), metadata=bearer(DROPPED)
        )
        await asyncio.to_thread(secured.clock.wait_for_timer, TURN_MS)
        await until_open_calls(secured, 4)  # both watches, the turn and the wait

        await revoke(secured, token_file)
        assert await open_calls(secured) == 1  # only the kept watch
        await secured.advance_async(TURN_MS)  # the turn ends: after the reload
        later = await create_agent(stubs, tmp_path, KEPT)

        with pytest.raises(grpc.aio.AioRpcError) as waited:
            await idle
        assert error_details(waited.value).reason == "TOKEN_REVOKED"
        turn_events = await read_until_refused(turn)
        assert not [e for e in turn_events if e.HasField("turn_completed")]
        watched = await read_until_refused(dropped_watch)
        assert not [
            e
            for reply in watched
            for e in reply.events
            if e.HasField("turn_completed") or e.agent_upserted.agent.id == later
        ]
        await until_seen(kept_watch, later)  # the other token's stream goes on
        kept_watch.cancel()
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # new calls: refused as before
            await create_agent(stubs, tmp_path, DROPPED)
        assert error_details(refused.value).reason == "TOKEN_INVALID"


async def test_calls_that_end_leave_nothing_registered(
    secured: DaemonThread, tmp_path: Path
) -> None:
    async with grpc.aio.insecure_channel(secured.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = await create_agent(stubs, tmp_path, KEPT)
        request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("hello"))
        _ = [e async for e in stubs.turns.StreamTurn(request, metadata=bearer(KEPT))]
        for _ in range(20):
            watch = await watch_all(stubs, KEPT)
            watch.cancel()  # the client hangs up
        with pytest.raises(grpc.aio.AioRpcError):  # an error inside a call: it ends too
            await stubs.agents.CreateAgent(create_request(""), metadata=bearer(KEPT))
    await until_open_calls(secured, 0)


def test_sighup_that_drops_a_token_ends_a_served_daemons_subscribe(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{KEPT}\n{DROPPED}\n")
    proc = DaemonProcess(tmp_path / "state", "--auth-token-file", str(tokens)).start()
    try:
        with grpc.insecure_channel(proc.address) as channel:
            stubs = Stubs.of(channel)
            watch = stubs.events.Subscribe(
                event_pb.SubscribeRequest(), metadata=bearer(DROPPED), timeout=30
            )
            while not any(e.HasField("synced") for e in next(watch).events):
                pass
            tokens.write_text(f"{KEPT}\n")
            assert proc.proc is not None
            proc.proc.send_signal(signal.SIGHUP)
            proc.wait_for_log("reloaded 1 token(s)")
            with pytest.raises(grpc.RpcError) as refused:
                next(watch)
            details = error_details(refused.value)
            assert (details.code, details.reason) == (
                grpc.StatusCode.UNAUTHENTICATED,
                "TOKEN_REVOKED",
            )
    finally:
        proc.stop()


async def test_a_revoked_token_ends_its_web_streams_too(tmp_path: Path, token_file: Path) -> None:
    config = replace(conftest.test_config(), auth_token_file=token_file, web_listen="127.0.0.1:0")
    daemon = DaemonThread(config).start()
    try:
        assert daemon.daemon is not None
        base = f"http://127.0.0.1:{daemon.daemon.web_port}"
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            dropped = stream_request("EventService/Subscribe", event_pb.SubscribeRequest())
            dropped["headers"].update(dict(bearer(DROPPED)))
            kept = stream_request("EventService/Subscribe", event_pb.SubscribeRequest())
            kept["headers"].update(dict(bearer(KEPT)))
            async with http.stream(**dropped) as one, http.stream(**kept) as other:
                cut = Stream(one, event_pb.SubscribeResponse, json_codec=False)
                going = Stream(other, event_pb.SubscribeResponse, json_codec=False)
                assert (await cut.read()).events[-1].HasField("synced")
                assert (await going.read()).events[-1].HasField("synced")
                await revoke(daemon, token_file)
                assert await cut.read() is None  # ended in-band, with the status
                error = cut.error()
                assert error is not None
                assert (error.code, error.reason) == ("unauthenticated", "TOKEN_REVOKED")
                async with grpc.aio.insecure_channel(daemon.address) as channel:
                    later = await create_agent(Stubs.of(channel), tmp_path, KEPT)
                while True:  # the kept token's stream goes on
                    reply = await going.read()
                    assert reply is not None
                    if any(e.agent_upserted.agent.id == later for e in reply.events):
                        break
    finally:
        daemon.stop()

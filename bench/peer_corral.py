"""corral for the peer bench: `corral serve` (the durable store, as users run it) with one
provider, `opencode`, of kind acp running the pinned `opencode acp` with the same offline
configuration as the peer's own server (bench/peer_opencode.py). Watchers are Subscribe
streams scoped to the agent, one channel (one HTTP/2 connection) each, as separate clients
would have; a dropped watcher resumes with the revision and incarnation it last saw.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

import grpc

from bench import peer_opencode, peer_procs
from bench.peer_api import SideBase, WatcherState
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import timeline_service_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2_grpc as timeline_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from tests.agents import programs

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
# gRPC's length prefix: a flag byte and four of length before each message.
GRPC_PREFIX = 5


def providers_file(argv: list[str], env: dict[str, str]) -> str:
    command = ", ".join(json.dumps(arg) for arg in argv)
    table = ", ".join(f"{key} = {json.dumps(value)}" for key, value in env.items())
    return f'[providers.opencode]\nkind = "acp"\ncommand = [{command}]\nenv = {{ {table} }}\n'


class CorralServer:
    name = "corral"

    def __init__(self, root: Path, model_url: str) -> None:
        self.cwd = root / "work"
        self.cwd.mkdir(parents=True, exist_ok=True)
        env, self.tag = peer_opencode.environment(root / "home", model_url)
        config = root / "corral.toml"
        config.write_text(providers_file([str(peer_opencode.binary()), "acp"], env))
        argv = [sys.executable, "-m", "corral_cli.main", "serve", "--listen", "127.0.0.1:0"]
        argv += ["--state-dir", str(root / "state"), "--drain-delay-s", "0"]
        argv += ["--config", str(config)]
        daemon_env = {k: v for k, v in env.items() if k != "OPENCODE_CONFIG_CONTENT"}
        daemon_env |= {"PYTHONPATH": ":".join(sys.path), "PYTHONUNBUFFERED": "1"}
        daemon_env.pop(programs.LEFTOVER_TAG)  # only the agent carries the tag
        self.server = peer_procs.Server(argv, daemon_env, self.cwd, root / "logs")
        self.address = ""

    @property
    def pid(self) -> int:
        return self.server.pid

    def agent_pids(self) -> list[int]:
        from tests.agents.child import tagged_processes

        return tagged_processes(programs.LEFTOVER_TAG, self.tag)

    def start(self) -> None:
        self.server.start()
        text = self.server.wait_for_output("listening on", 120)
        match = LISTENING.search(text.splitlines()[-1]) or LISTENING.search(text)
        assert match is not None, text
        self.address = f"127.0.0.1:{match.group(1)}"

    def stop(self) -> None:
        self.server.stop()
        peer_opencode.programs_sweep(self.tag)

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.address)

    async def create_agent(self, channel: grpc.aio.Channel) -> str:
        agents = agent_grpc.AgentServiceStub(channel)
        request = agent_pb.CreateAgentRequest(provider="opencode", cwd=str(self.cwd))
        return str((await agents.CreateAgent(request)).agent.id)

    async def prompt(self, channel: grpc.aio.Channel, agent_id: str, text: str) -> None:
        turns = turn_grpc.TurnServiceStub(channel)
        content = [content_pb.ContentPart(text=text)]
        await turns.SendPrompt(turn_pb.SendPromptRequest(agent_id=agent_id, content=content))

    async def wait_idle(self, channel: grpc.aio.Channel, agent_id: str) -> None:
        turns = turn_grpc.TurnServiceStub(channel)
        await turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id), timeout=120)


def subscribe(
    channel: grpc.aio.Channel, agent_id: str, revision: int | None = None, incarnation: str = ""
) -> grpc.aio.UnaryStreamCall[event_pb.SubscribeRequest, event_pb.SubscribeResponse]:
    request = event_pb.SubscribeRequest(agent_ids=[agent_id])
    if revision is not None:
        request.resume_revision = revision
        request.resume_incarnation = incarnation
    return event_grpc.EventServiceStub(channel).Subscribe(request)


def fetch_tail(
    channel: grpc.Channel, agent_id: str, limit: int
) -> timeline_pb.FetchTimelineResponse:
    """The last `limit` rows (0: the whole timeline), on a blocking channel."""
    stub = timeline_grpc.TimelineServiceStub(channel)
    request = timeline_pb.FetchTimelineRequest(
        agent_id=agent_id, direction=timeline_pb.TIMELINE_DIRECTION_TAIL, limit=limit
    )
    response: timeline_pb.FetchTimelineResponse = stub.FetchTimeline(request, timeout=60)
    return response


class CorralView:
    """What one watcher makes of the events of the agent's current turn."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.chunks: list[int] = []  # the assistant rows' seqs, in arrival order
        self.text = ""
        self.idle = False
        self.last_chunk_s = 0.0
        self.synced = False
        self.revision = 0
        self.incarnation = ""
        self.bytes_in = 0
        self.turn_started = False
        self.turn_id = ""

    def take(self, response: event_pb.SubscribeResponse) -> None:
        self.bytes_in += response.ByteSize() + GRPC_PREFIX
        for event in response.events:
            self.revision = max(self.revision, event.revision)
            kind = event.WhichOneof("payload")
            if kind == "synced":
                self.synced = True
                self.incarnation = event.synced.incarnation
            elif kind == "turn_started":
                self.turn_started = True
                self.turn_id = event.turn_started.turn_id
            elif kind == "timeline_row_appended" and self.turn_started:
                row = event.timeline_row_appended.row
                if row.item.WhichOneof("kind") == "assistant_message":
                    self.chunks.append(row.seq)
                    self.last_chunk_s = time.monotonic()
                    self.text += row.item.assistant_message.text
            elif kind == "turn_completed" and self.turn_started:
                self.idle = True


class CorralWatcher(WatcherState[CorralView]):
    """One Subscribe client on a channel of its own, following one agent (bytes: of the
    length-prefixed messages)."""

    def __init__(self, server: CorralServer, agent_id: str) -> None:
        super().__init__(CorralView(agent_id))
        self.server = server

    async def run(self, drop_after: int = 0, resume: bool = False) -> None:
        """Follows the agent until its turn completes, or until `drop_after` reply rows came
        (then cancels the stream). `resume` resumes after the last revision seen."""
        view = self.view
        revision = view.revision if resume else None
        async with self.server.channel() as channel:
            call = subscribe(channel, view.agent_id, revision, view.incarnation)
            start = view.bytes_in
            try:
                async for response in call:
                    view.take(response)
                    if not self.ready.is_set() and view.synced:
                        self.ready.set()  # the snapshot ends with `synced`
                        start = view.bytes_in
                    if view.idle:
                        self.done_s = time.monotonic()
                        return
                    if drop_after and len(view.chunks) >= drop_after:
                        return
                raise RuntimeError("corral ended the Subscribe stream")
            finally:
                self.bytes_in += view.bytes_in - start
                call.cancel()


class CorralSide(SideBase[CorralServer]):
    """corral as the bench drives it: agents, prompts, watchers, history pages."""

    def __init__(self, root: Path, model_url: str) -> None:
        super().__init__("corral", CorralServer(root, model_url))
        self._channel: grpc.aio.Channel | None = None

    def agent_pids(self) -> list[int]:
        return self.server.agent_pids()

    def _control(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = self.server.channel()
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def new_session(self) -> str:
        return await self.server.create_agent(self._control())

    async def prompt(self, session: str, text: str) -> None:
        await self.server.prompt(self._control(), session, text)

    async def turn(self, session: str, text: str) -> None:
        await self.prompt(session, text)
        await self.server.wait_idle(self._control(), session)

    def watcher(self, session: str) -> CorralWatcher:
        return CorralWatcher(self.server, session)

    async def reply_rows(self, session: str, watcher: CorralWatcher) -> int:
        """The assistant rows stored for the watcher's turn."""
        return await asyncio.to_thread(self._reply_rows, session, watcher.view.turn_id)

    def _reply_rows(self, session: str, turn_id: str) -> int:
        with grpc.insecure_channel(self.server.address) as channel:
            rows = fetch_tail(channel, session, 500).rows
        kinds = [r.item.WhichOneof("kind") for r in rows if r.turn_id == turn_id]
        return kinds.count("assistant_message")

    def history(self, session: str) -> CorralHistory:
        return CorralHistory(self.server.address, session)


class CorralHistory:
    """History pages on one blocking channel: FetchTimeline TAIL with the rows of the last
    turns (the rows from the user row that began the first of them)."""

    def __init__(self, address: str, agent_id: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.agent_id = agent_id
        whole = fetch_tail(self.channel, agent_id, 0)
        self.max_seq = whole.window.max_seq
        self.turn_starts = [
            r.seq for r in whole.rows if r.item.WhichOneof("kind") == "user_message"
        ]

    def turns(self) -> int:
        return len(self.turn_starts)

    def fetch(self, turns: int | None) -> int:
        limit = 0 if turns is None else self.max_seq - self.turn_starts[-turns] + 1
        response = fetch_tail(self.channel, self.agent_id, limit)
        return response.ByteSize() + GRPC_PREFIX

    def close(self) -> None:
        self.channel.close()

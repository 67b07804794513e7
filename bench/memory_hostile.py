"""P10 (BENCHMARKS.md#goals): resident memory under hostile clients, of a `corral serve` process
(VmRSS from /proc/PID/status).

  streams   2,000 Subscribe streams that never read (20 raw HTTP/2 connections x 100, never
            granting flow-control window) while an agent bursts: three turns with a ~300 kB
            reply each, then a turn of 10,000 small rows (`/history`). Peak resident memory
            during the burst, and when a normal subscriber has every event.
            Goal: under 300 MB.
  refused   then, on a fresh daemon, 20 ClearAttention requests of 5.4 MB (2.7 M empty ids),
            each answered INVALID_ARGUMENT: how long until the daemon is back under 1.5x its
            idle size. Goal: within 5 s.

Run: .venv/bin/python -m bench.memory_hostile   (about a minute)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, SyncStubs, create_request, prompt_request
from tests.support.memory import rss_mb
from tests.support.raw_h2 import NeverReadingClient

CONNECTIONS, STREAMS = 20, 100
REPLY = " ".join(f"word{i:05d}" for i in range(30_000))  # ~300 kB
REFUSED, IDS = 20, 2_700_000
DAEMON = (
    sys.executable,
    "-m",
    "corral_server.daemon",
    "--listen",
    "127.0.0.1:0",
    "--drain-delay-s",
    "0",
)


@dataclass
class Figures:
    idle_mb: float
    streams_open_mb: float
    peak_mb: float
    reader_last: int
    head: int
    caught_up_s: float
    refused_idle_mb: float
    refused_after_mb: float
    refused_back_s: float | None
    refused_final_mb: float


class Daemon:
    def __init__(self, state: str) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [*DAEMON, "--state-dir", state],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on \S+:(\d+)", line)
        if match is None:
            self.proc.kill()
            raise RuntimeError(f"daemon did not start: {line!r}")
        self.address = f"127.0.0.1:{match.group(1)}"

    def rss(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


class Reader(threading.Thread):
    def __init__(self, call: Iterator[event_pb.SubscribeResponse]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.events = 0
        self.last = 0

    def run(self) -> None:
        try:
            for response in self.call:
                for event in response.events:
                    self.events += 1
                    self.last = max(self.last, event.revision)
        except grpc.RpcError:
            pass


def never_reading_streams(state: str) -> tuple[float, float, float, int, int, float]:
    daemon = Daemon(state)
    try:
        with grpc.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            with tempfile.TemporaryDirectory() as cwd:
                agent = stubs.agents.CreateAgent(create_request(cwd)).agent
                call = stubs.events.Subscribe(event_pb.SubscribeRequest())
                next(call)
                reader = Reader(call)
                reader.start()
                idle = daemon.rss()
                hostile = [NeverReadingClient(daemon.address, STREAMS) for _ in range(CONNECTIONS)]
                opened = daemon.rss()
                peak = opened
                prompts = [*(["/reply " + REPLY] * 3), "/history 10000"]
                for prompt in prompts:
                    stubs.turns.SendPrompt(prompt_request(agent.id, prompt), timeout=60)
                    done = threading.Event()

                    def wait(agent_id: str = agent.id, done: threading.Event = done) -> None:
                        request = turn_pb.WaitForIdleRequest(agent_id=agent_id)
                        stubs.turns.WaitForIdle(request, timeout=120)
                        done.set()

                    threading.Thread(target=wait, daemon=True).start()
                    while not done.wait(0.05):
                        peak = max(peak, daemon.rss())
                head = _head(stubs)
                # Until the reader has everything up to the head, or 60 s.
                start = time.monotonic()
                while reader.last < head and time.monotonic() - start < 60:
                    peak = max(peak, daemon.rss())
                    time.sleep(0.05)
                caught_up = time.monotonic() - start
                for client in hostile:
                    client.close()
                call.cancel()
                return idle, opened, peak, reader.last, head, caught_up
    finally:
        daemon.stop()


def _head(stubs: SyncStubs) -> int:
    """The daemon's head revision: the Synced of a fresh subscription."""
    call = stubs.events.Subscribe(event_pb.SubscribeRequest(), timeout=60)
    try:
        for response in call:
            for event in response.events:
                if event.HasField("synced"):
                    return event.synced.revision
    finally:
        call.cancel()
    raise RuntimeError("no Synced")


def refused_requests(state: str) -> tuple[float, float, float | None, float]:
    daemon = Daemon(state)
    try:
        options = [("grpc.max_send_message_length", 64 << 20)]
        with grpc.insecure_channel(daemon.address, options=options) as channel:
            stubs = Stubs.of(channel)
            stubs.agents.ListAgents(agent_pb.ListAgentsRequest())
            idle = daemon.rss()
            body = agent_pb.ClearAttentionRequest(agent_ids=[""] * IDS).SerializeToString()
            clear: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                "/corral.v1.AgentService/ClearAttention", request_serializer=bytes
            )
            for _ in range(REFUSED):
                try:
                    clear(body)
                except grpc.RpcError as error:
                    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
            after = daemon.rss()
            start = time.monotonic()
            back: float | None = None
            while time.monotonic() - start < 10:
                if back is None and daemon.rss() < 1.5 * idle:
                    back = time.monotonic() - start
                time.sleep(0.05)
            return idle, after, back, daemon.rss()
    finally:
        daemon.stop()


def measure() -> Figures:
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        streams = never_reading_streams(one)
        refused = refused_requests(two)
    return Figures(*streams, *refused)


def report(f: Figures) -> str:
    streams = CONNECTIONS * STREAMS
    back = "not within 10 s" if f.refused_back_s is None else f"{f.refused_back_s:.1f} s"
    return "\n".join(
        [
            f"P10 {streams:,} never-reading streams during a burst: peak {f.peak_mb:.0f} MB "
            f"resident (idle {f.idle_mb:.0f} MB, streams open {f.streams_open_mb:.0f} MB; "
            f"goal < 300 MB); a normal subscriber had every event up to the head "
            f"{f.head:,} (its last {f.reader_last:,}) {f.caught_up_s:.1f} s after the last "
            "turn",
            f"P10 after {REFUSED} refused 5.4 MB requests: {f.refused_after_mb:.0f} MB at once, "
            f"back under 1.5x idle ({f.refused_idle_mb:.0f} MB) in {back}, "
            f"{f.refused_final_mb:.0f} MB after 10 s (goal: under 1.5x within 5 s)",
        ]
    )


if __name__ == "__main__":
    print(report(measure()))

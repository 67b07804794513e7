"""Raw HTTP/2 clients that open Subscribe streams and never read them, against `corral serve`
(a subprocess, so its resident size is its own: VmRSS from /proc/PID/status): 2 connections x
50 streams while an agent streams three replies of ~300 kB. The daemon's memory stays bounded,
a normal subscriber gets every event in order, and each stalled stream ends with
stream_ending naming its resume point once its client reads again."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonProcess
from tests.support.memory import rss_mb
from tests.support.raw_h2 import NeverReadingClient

CONNECTIONS, STREAMS = 2, 50
TURNS = 3
REPLY = " ".join(f"word{i:05d}" for i in range(30_000))  # ~300 kB


@pytest.fixture
def served(tmp_path: Path) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(
        tmp_path / "state", "--drain-delay-s", "0", "--stream-stall-s", "1"
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


class Reader(threading.Thread):
    """A normal subscriber: collects every revision it is sent until `turns` completions."""

    def __init__(self, call: Iterator[event_pb.SubscribeResponse], turns: int) -> None:
        super().__init__(daemon=True)
        self.call, self.turns = call, turns
        self.revisions: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        completed = 0
        for response in self.call:
            for event in response.events:
                if event.revision:
                    self.revisions.append(event.revision)
                completed += event.HasField("turn_completed")
            if completed == self.turns:
                self.done.set()
                return


def test_never_reading_streams_are_bounded_ended_and_do_not_hold_back_a_reader(
    served: DaemonProcess, tmp_path: Path
) -> None:
    assert served.proc is not None
    pid = served.proc.pid
    with grpc.insecure_channel(served.address) as channel:
        stubs = Stubs.of(channel)
        agent = stubs.agents.CreateAgent(create_request(str(tmp_path))).agent
        reader_call = stubs.events.Subscribe(event_pb.SubscribeRequest())
        next(reader_call)  # subscribed before the turns
        reader = Reader(reader_call, TURNS)
        reader.start()
        idle = rss_mb(pid)
        hostile = [NeverReadingClient(served.address, STREAMS) for _ in range(CONNECTIONS)]
        try:
            peak = idle
            for _ in range(TURNS):
                stubs.turns.SendPrompt(prompt_request(agent.id, "/reply " + REPLY), timeout=30)
                stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id), timeout=30)
                peak = max(peak, rss_mb(pid))
            assert reader.done.wait(30), "the reader got every turn's completion"
            first = reader.revisions[0]
            assert reader.revisions == list(range(first, first + len(reader.revisions)))
            # Each stalled stream holds at most one event (the ~300 kB rows) twice over (ours
            # and grpc's copy): 100 x 0.6 MB, and generous slack.
            assert peak - idle < 150, f"{peak:.0f} MB resident at peak, {idle:.0f} MB before"
            # The stall deadline (1 s) ends the hostile streams and the daemon logs it; that every
            # one of them ended is checked on each stream below (waiting here for the log's count
            # to reach them all could wait for ever if a line were the last one read).
            line = served.wait_for_log("streams whose clients did not read")
            assert re.search(r"\((\d+) so far\)", line) is not None
            for client in hostile:
                # Each stalled stream still has its ~300 kB batch to take in before its ending:
                # 100 of them can take a while on a loaded machine (the read stops once all end).
                for result in client.read_all(120).values():
                    events = [event for message in result.messages() for event in message.events]
                    assert result.ended and not result.reset, (
                        f"a stalled stream did not end with its trailers: {len(events)} events,"
                        f" reset {result.reset}"
                    )
                    endings = [e.stream_ending for e in events if e.HasField("stream_ending")]
                    assert len(endings) == 1 and events[-1].HasField("stream_ending")
                    assert result.trailers.get("grpc-status") == "0"
                    # The resume point covers what the stream was given: past its snapshot's
                    # Synced, or 0 when its snapshot was not all sent (a resume from 0 replays
                    # or resets; it never skips).
                    synced = [e.synced.revision for e in events if e.HasField("synced")]
                    given = [e.revision for e in events if e.revision]
                    resume = endings[0].resume_revision
                    if synced:
                        assert max([synced[0], *given]) <= resume <= reader.revisions[-1]
                    else:
                        assert resume == 0 and not given
        finally:  # also when an assertion failed: no socket left to the collector
            for client in hostile:
                client.close()
        reader_call.cancel()

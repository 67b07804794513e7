"""`corral serve --cluster URLS --node-id N --advertise HOST:PORT` as a process on three real
NATS servers: it serves, its events are in the cluster's stream; bad cluster flags stop the
start with one clear line and exit code 2, before anything is created."""

from __future__ import annotations

import contextlib
from pathlib import Path

import grpc
import pytest

from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config, Daemon
from corral_server.clock import FakeClock
from corral_server.cluster.log import EventLog
from corral_server.cluster.settings import ClusterConfig, ClusterStartError
from corral_server.serve_flags import access_error, build_parser, cluster_config
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonProcess, DaemonThread
from tests.support.nats import NatsCluster, connect, free_ports


async def test_a_node_started_by_corral_serve_writes_its_agents_events_to_the_stream(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    urls = ",".join(nats_cluster.urls)
    flags = ("--cluster", urls, "--node-id", "serve-1", "--advertise", "127.0.0.1:1")
    node = DaemonProcess(tmp_path / "state", *flags, "--web-listen", "off").start()
    try:
        async with grpc.aio.insecure_channel(node.address) as channel:
            stubs = Stubs.of(channel)
            agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
            await stubs.turns.SendPrompt(prompt_request(agent.id, "/reply through the stream"))
            await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id))
        client = await connect(nats_cluster)
        try:
            log = await EventLog.open(client.jetstream())  # the default stream's names
            batches = [batch for batch in await log.read(1) if batch.agent == agent.id]
        finally:
            await client.close()
        assert batches[0].owner is not None and batches[0].owner.startswith("serve-1-")
        assert any(b"through the stream" in event for b in batches for event in b.events)
        node.drained()
    finally:
        node.stop()


def test_a_bad_cluster_flag_stops_the_start_with_a_clear_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    flags = ("--cluster", "http://127.0.0.1:4222")
    code, _, err = DaemonProcess(state, *flags).start(expect_ready=False).wait()
    assert code == 2
    assert "--cluster: 'http://127.0.0.1:4222' is not a nats://HOST:PORT URL" in err
    assert not state.exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--cluster", "nats://127.0.0.1:4222,"), ""),
        (("--cluster", ","), "--cluster needs at least one nats://HOST:PORT URL"),
        (("--cluster", "nats://h:4222", "--node-id", "a.b"), "--node-id 'a.b': letters"),
        (("--node-id", "n1"), "--node-id, --advertise and --lease-s go with --cluster"),
        (("--cluster", "nats://h:4222", "--advertise", "nowhere"), "is not HOST:PORT"),
        (("--cluster", "nats://h:4222", "--lease-s", "1"), "between 2 and 3600 seconds"),
        (("--cluster", "nats://h:4222", "--listen", "unix:/tmp/x.sock"), "needs --advertise"),
    ],
)
def test_the_cluster_flags_are_checked(flags: tuple[str, ...], says: str) -> None:
    refusal = access_error(build_parser().parse_args(list(flags)))
    assert says in refusal if says else refusal == ""


def test_the_cluster_flags_make_the_nodes_config() -> None:
    args = build_parser().parse_args(["--cluster", "nats://a:1, nats://b:2", "--listen", "h:7"])
    cluster = cluster_config(args)
    assert cluster is not None
    assert cluster.urls == ("nats://a:1", "nats://b:2")
    assert cluster.advertise == "h:7"  # the listen address by default
    assert cluster.node_id  # the host's name


async def test_a_node_that_reaches_no_nats_server_does_not_start(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    cluster = ClusterConfig((f"nats://127.0.0.1:{port}",), "a", "127.0.0.1:0", connect_s=0.3)
    daemon = Daemon(Config(state_dir=tmp_path / "a", cluster=cluster), clock=FakeClock())
    with pytest.raises(ClusterStartError, match=f"no NATS server of nats://127.0.0.1:{port}"):
        await daemon.start()


def test_a_second_process_with_a_nodes_id_does_not_start(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    cluster = ClusterConfig(
        tuple(nats_cluster.urls),
        "twin",
        "127.0.0.1:0",
        stream="TWINS",
        prefix="twins.events.",
        leases_bucket="twins_leases",
        nodes_bucket="twins_nodes",
    )
    with contextlib.ExitStack() as stopped:
        first = DaemonThread(Config(state_dir=tmp_path / "first", cluster=cluster)).start()
        stopped.callback(first.stop)
        second = DaemonThread(Config(state_dir=tmp_path / "second", cluster=cluster))
        stopped.callback(second.stop)  # its thread runs, though its start failed
        with pytest.raises(ClusterStartError, match="node id twin"):
            second.start()


async def test_a_node_needs_a_state_directory_for_its_read_model() -> None:
    cluster = ClusterConfig(("nats://127.0.0.1:4222",), "a", "127.0.0.1:0")
    daemon = Daemon(Config(cluster=cluster), clock=FakeClock())
    with pytest.raises(ValueError, match="a cluster node needs a state directory"):
        await daemon.start()

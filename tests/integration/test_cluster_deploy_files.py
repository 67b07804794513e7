"""deploy/cluster/compose.yaml against the files it runs: each node's `corral serve` arguments
go through the daemon's own parser, name the three NATS servers at the port their configs
listen on, its own node id, an advertised address that is its own host and port, and its own
state volume; Envoy's endpoints are the nodes' gRPC and web ports; every service outlasts its
own graceful stop before it is killed. (The files themselves: test_cluster_envoy.py and
test_cluster_nats_configs.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from corral_server.daemon import build_parser
from corral_server.listen import is_loopback
from corral_server.serve_flags import access_error

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "cluster"
NODES = ("corral-1", "corral-2", "corral-3")
NATS = ("nats-1", "nats-2", "nats-3")
CLUSTER_FLAGS = ("--cluster", "--node-id", "--advertise")


def compose() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return services


def seconds(duration: str) -> float:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)s", duration)
    assert found, duration
    return float(found[1])


def port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def cluster_flags(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The cluster flags' values, and the words they take in `argv` in order."""
    values: dict[str, str] = {}
    words: list[str] = []
    for index, word in enumerate(argv):
        if word in CLUSTER_FLAGS:
            values[word] = argv[index + 1]
            words += argv[index : index + 2]
    return values, words


def serve(argv: list[str]) -> tuple[Any, dict[str, str]]:
    """corral serve's own parser on `argv`: every flag must be its own, the cluster flags
    included once the parser has them (until then they are all it may leave over)."""
    args, left = build_parser().parse_known_args(argv)
    values, words = cluster_flags(argv)
    assert sorted(values) == sorted(CLUSTER_FLAGS), argv
    assert left in ([], words), left
    return args, values


def nats_setting(name: str, key: str) -> str:
    """A setting of the file outside its `cluster` block."""
    text = (DEPLOY / f"{name}.conf").read_text()
    text = text[: text.index("cluster {")]
    (found,) = re.findall(rf"^\s*{key}:\s*(.+?)\s*$", text, flags=re.MULTILINE)
    return str(found).strip('"')


def nats_cluster_listen(name: str) -> str:
    text = (DEPLOY / f"{name}.conf").read_text()
    block = text[text.index("cluster {") :]
    (found,) = re.findall(r"^\s*listen:\s*(\S+)", block, flags=re.MULTILINE)
    return str(found)


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Mount path -> source of a service's volumes."""
    return {entry.split(":")[1]: entry.split(":")[0] for entry in service["volumes"]}


def test_each_node_is_its_own_node_of_the_three_nats_servers() -> None:
    services = compose()["services"]
    urls = ",".join(f"nats://{name}:{port(nats_setting(name, 'listen'))}" for name in NATS)
    volumes = set()
    for name in NODES:
        node = services[name]
        args, cluster = serve([str(word) for word in node["command"]])
        assert cluster["--cluster"] == urls
        assert cluster["--node-id"] == node["hostname"] == name
        assert cluster["--advertise"] == f"{name}:{port(args.listen)}"
        assert not is_loopback(args.listen) and not is_loopback(args.web_listen)
        assert access_error(args) == ""  # the daemon's own refusals (tokens off loopback...)
        assert args.auth_token_file == Path("/run/secrets") / node["secrets"][0]
        (volume,) = [
            source for path, source in mounts(node).items() if Path(path) == args.state_dir
        ]
        volumes.add(volume)
        assert seconds(node["stop_grace_period"]) > args.drain_delay_s + args.drain_grace_s
        assert set(node["depends_on"]) == set(NATS)
    assert len(volumes) == len(NODES)  # a state directory each


def test_the_nats_services_run_their_own_configs() -> None:
    services = compose()["services"]
    for name in NATS:
        server = services[name]
        assert server["hostname"] == name == nats_setting(name, "server_name")
        config = server["command"][server["command"].index("-c") + 1]
        assert mounts(server)[config] == f"./{name}.conf"
        store = Path(nats_setting(name, "store_dir"))
        assert any(store.is_relative_to(path) for path in mounts(server) if path != config)
        routes = re.findall(r"nats-route://(nats-\d):(\d+)", (DEPLOY / f"{name}.conf").read_text())
        assert {peer for peer, _ in routes} == set(NATS) - {name}
        for peer, route_port in routes:
            assert int(route_port) == port(nats_cluster_listen(peer))
        health = " ".join(server["healthcheck"]["test"])
        assert f"127.0.0.1:{port(nats_setting(name, 'http'))}/healthz" in health
        lame_duck = seconds(nats_setting(name, "lame_duck_duration"))
        assert server["stop_signal"] == "SIGUSR2"  # lame duck, then exit
        assert seconds(server["stop_grace_period"]) > lame_duck


def endpoints(cluster: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host, port, health check port) of each endpoint."""
    (group,) = cluster["load_assignment"]["endpoints"]
    found = []
    for entry in group["lb_endpoints"]:
        address = entry["endpoint"]["address"]["socket_address"]
        checked = entry["endpoint"].get("health_check_config", {}).get("port_value")
        found.append((address["address"], address["port_value"], checked or address["port_value"]))
    return found


def test_envoy_sends_to_the_nodes_grpc_and_web_ports() -> None:
    services = compose()["services"]
    envoy = yaml.safe_load((DEPLOY / "envoy.yaml").read_text())["static_resources"]
    clusters = {cluster["name"]: cluster for cluster in envoy["clusters"]}
    grpc, web = [], []
    for name in NODES:
        args, _ = serve([str(word) for word in services[name]["command"]])
        grpc.append((name, port(args.listen), port(args.listen)))
        web.append((name, port(args.web_listen), port(args.listen)))
    assert endpoints(clusters["corral"]) == grpc
    assert endpoints(clusters["corral_web"]) == web
    listening = sorted(
        entry["address"]["socket_address"]["port_value"] for entry in envoy["listeners"]
    )
    published = sorted(int(entry.split(":")[0]) for entry in services["envoy"]["ports"])
    assert published == listening
    assert mounts(services["envoy"])["/etc/envoy/envoy.yaml"] == "./envoy.yaml"

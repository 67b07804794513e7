"""What the daemon says about itself (ServerService.GetServerInfo), for `corral status` and
`corral --version`: asked once, and told in a few lines.

`corral --version` is asked for before any command is parsed (arguments.py raises
VersionRequested), so its global options are read here, wherever they stand on the line.

Must not: fail a command because the daemon cannot say: an older daemon (UNIMPLEMENTED), a
refusal or no daemon at all is None, and the caller says what it can without it.
"""

from __future__ import annotations

import json
import os

import grpc
from google.protobuf import json_format

from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral_cli.client import AccessError, Client, connect, load_access
from corral_cli.grammar import Parser, add_globals, version

# `corral --version` waits this long at most for a daemon (a blackholed address must not hang).
VERSION_TIMEOUT_S = 2.0
STATE_NAMES = {
    server_pb.SERVING_STATE_SERVING: "serving",
    server_pb.SERVING_STATE_DRAINING: "draining",
    server_pb.SERVING_STATE_STANDBY: "standby",
}


class VersionRequested(Exception):
    """`--version` was given: print the versions instead of running a command."""


def ask(client: Client, timeout_s: float | None = None) -> server_pb.GetServerInfoResponse | None:
    stub = server_grpc.ServerServiceStub(client.channel)
    try:
        answer: server_pb.GetServerInfoResponse = stub.GetServerInfo(
            server_pb.GetServerInfoRequest(), timeout=timeout_s or client.timeout_s
        )
    except grpc.RpcError:
        return None
    return answer


def as_dict(info: server_pb.GetServerInfoResponse) -> dict[str, object]:
    """The answer with the .proto field names, as `--json` prints every message."""
    return json_format.MessageToDict(info, preserving_proto_field_name=True)


def describe(info: server_pb.GetServerInfoResponse) -> list[str]:
    """`corral status`'s lines about the daemon itself."""
    limits, features = info.limits, info.features
    log = f"event log {info.incarnation} at revision {info.head_revision}"
    on = [name for name, is_on in _features(features) if is_on]
    return [
        f"daemon: corral {info.version} (API {info.api_version})"
        + (f", {log}" if info.incarnation else ""),
        f"limits: requests of {limits.max_request_bytes} bytes and {limits.max_ids_per_request} "
        f"ids, {limits.max_streams_per_connection} calls per connection",
        f"prompts: {limits.max_prompt_chars} chars, {limits.max_prompt_bytes} bytes of text, "
        f"{limits.max_content_parts} parts",
        f"providers: {', '.join(info.providers) or 'none'}",
        f"features: {', '.join(on) or 'none'}",
    ]


def _features(features: server_pb.ServerFeatures) -> list[tuple[str, bool]]:
    return [
        (f"web {features.web_url}", features.web),
        (f"metrics {features.metrics_url}", features.metrics),
        ("MCP", features.mcp),
        ("tokens", features.tokens),
        ("mutual TLS" if features.mutual_tls else "TLS", features.tls),
        ("reflection", features.reflection),
        ("standby", features.standby),
    ]


def print_versions(argv: list[str]) -> int:
    """`corral --version`: the CLI's version, then the daemon's at --addr when it answers."""
    parser = Parser(add_help=False)
    add_globals(parser, listed=True)
    args, _ = parser.parse_known_args(argv)
    info = None
    try:
        access = load_access(
            args.token_file,
            os.environ.get("CORRAL_TOKEN", ""),
            args.tls_ca,
            args.tls_cert,
            args.tls_key,
        )
    except AccessError:
        access = None  # the CLI's own version is still the answer
    if access is not None:
        with connect(args.addr, args.timeout, access) as client:
            info = ask(client, min(args.timeout, VERSION_TIMEOUT_S))
    if args.json:
        daemon = {"addr": args.addr} | as_dict(info) if info is not None else None
        print(json.dumps({"cli_version": version()} | ({"daemon": daemon} if daemon else {})))
        return 0
    print(f"corral {version()}")
    if info is not None:
        state = STATE_NAMES.get(info.state, "unknown")
        print(f"daemon at {args.addr}: corral {info.version} (API {info.api_version}, {state})")
    return 0

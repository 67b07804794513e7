"""The one line `corral serve` prints on stdout once it serves, or once it waits as a standby:
the version, every address it serves, the state directory, and what a client needs to connect
(TLS, tokens, no reflection). It is the start-up's only output at the default log level, and
scripts and tests read it to learn the ports a `--listen HOST:0` daemon bound: the gRPC address
comes first, after "listening on" (or "standby on").

    corral 0.1.0 (API corral.v1) listening on 127.0.0.1:50051, web http://127.0.0.1:50052/,
    MCP http://127.0.0.1:41234/mcp, metrics http://127.0.0.1:9100/metrics; state
    /home/me/.local/state/corral (2 agents); tokens

(one line: wrapped here). Must not: print or log (daemon.py prints it)."""

from __future__ import annotations

from pathlib import Path

from corral_server.server_info import ServerFeatures, ServerInfo


def serving(
    info: ServerInfo, address: str, state_dir: Path | None, agents: int, mcp_url: str
) -> str:
    """The line of a daemon that serves on `address` (gRPC) and the URLs in `info` (with no
    state directory: one that keeps everything in memory)."""
    features = info.features
    urls = (("web", features.web_url), ("MCP", mcp_url), ("metrics", features.metrics_url))
    served = "".join(f", {label} {url}" for label, url in urls if url)
    kept = f"{agents} agent" + ("" if agents == 1 else "s")
    state = f"state {state_dir}" if state_dir is not None else "state in memory"
    return f"{_named(info)} listening on {address}{served}; {state} ({kept}){_access(features)}"


def standby(info: ServerInfo, address: str, state_dir: Path) -> str:
    """The line of a standby answering on `address` while another daemon holds `state_dir`."""
    return f"{_named(info)} standby on {address} (waiting for {state_dir}){_access(info.features)}"


def _named(info: ServerInfo) -> str:
    return f"corral {info.version} (API {info.api_version})"


def _access(features: ServerFeatures) -> str:
    """What a client needs beyond the address: e.g. "; TLS; tokens", or ""."""
    notes: list[str] = []
    if features.tls:
        notes.append("mutual TLS" if features.mutual_tls else "TLS")
    if features.tokens:
        notes.append("tokens")
    if not features.reflection:
        notes.append("no reflection")
    return "".join(f"; {note}" for note in notes)

"""`corral serve`'s flags: the parser, the checks on access flags that refuse a start, and
the daemon's Config built from them.

Must not: bind, lock or create anything (daemon.py starts the daemon from what this returns).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from corral_server.cluster.settings import (
    ClusterConfig,
    check_advertise,
    check_node_id,
    default_node_id,
    parse_urls,
)
from corral_server.config import Config
from corral_server.listen import is_local, is_loopback, socket_dir_problem, unix_path
from corral_server.manager.validate import Limits
from corral_server.providers.config import ProviderEntry
from corral_server.rpc.tls import TlsFiles

DEFAULT_LISTEN = "127.0.0.1:50051"
# The web port (Connect, gRPC-Web, the dashboard): on by default, on loopback, next to gRPC's.
DEFAULT_WEB_LISTEN = "127.0.0.1:50052"


class _OneLineErrors(argparse.ArgumentParser):
    """A bad flag is one line (not argparse's usage block) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(prog: str = "corral serve") -> argparse.ArgumentParser:
    p = _OneLineErrors(prog=prog, description="Run the corral daemon.")
    _add_basics(p)
    _add_edges(p)
    _add_stream_bounds(p)
    _add_logging(p)
    _add_access(p)
    _add_cluster(p)
    return p


def _add_cluster(p: argparse.ArgumentParser) -> None:
    cluster = p.add_argument_group("cluster (preview; docs/cluster.md)")
    cluster.add_argument(
        "--cluster",
        default=None,
        metavar="URLS",
        help="run as a node of a corral cluster on these NATS JetStream servers "
        "(nats://HOST:PORT, comma separated): events go through the cluster's stream",
    )
    cluster.add_argument(
        "--node-id",
        default=None,
        help="this node's name in the cluster (letters, digits, '_', '-'; default: the host name)",
    )
    cluster.add_argument(
        "--advertise",
        default=None,
        metavar="HOST:PORT",
        help="the address other nodes and balancers reach this node's gRPC port at "
        "(default: --listen)",
    )
    cluster.add_argument(
        "--lease-s",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long an agent's lease (and this node's directory entry) lasts unrenewed: "
        "a lost node's agents show NODE_LOST after it and the 1 s skew margin (default: 10)",
    )


def cluster_config(args: argparse.Namespace) -> ClusterConfig | None:
    """The cluster flags as a ClusterConfig (None without --cluster); ValueError says what is
    wrong with them."""
    if args.cluster is None:
        if args.node_id is not None or args.advertise is not None or args.lease_s is not None:
            raise ValueError("--node-id, --advertise and --lease-s go with --cluster")
        return None
    if unix_path(args.listen) is not None and args.advertise is None:
        raise ValueError("a cluster node listening on a unix socket needs --advertise HOST:PORT")
    return ClusterConfig(
        urls=parse_urls(args.cluster),
        node_id=check_node_id(args.node_id if args.node_id is not None else default_node_id()),
        advertise=check_advertise(args.advertise or args.listen),
        lease_ms=_lease_ms(args.lease_s),
    )


def _lease_ms(lease_s: float | None) -> int:
    if lease_s is None:
        return ClusterConfig.lease_ms
    if not 2 <= lease_s <= 3600:  # the skew margin (1 s) must stay well inside it
        raise ValueError(f"--lease-s {lease_s:g}: between 2 and 3600 seconds")
    return round(lease_s * 1000)


def _add_basics(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help="HOST:PORT, or unix:PATH for a Unix socket only your user can use (0600) "
        "(default %(default)s)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="state directory (default $XDG_STATE_HOME/corral or ~/.local/state/corral)",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="providers file (TOML, [providers.NAME] tables; docs/providers.md); without "
        "one: scripted, and claude-code, codex, gemini, claude-acp when on PATH; SIGHUP, or "
        "a change of the file, reloads it",
    )
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=8 * 1024 * 1024,
        help="larger requests get RESOURCE_EXHAUSTED (default %(default)s)",
    )
    p.add_argument(
        "--max-prompt-chars",
        type=int,
        default=Limits().max_prompt_chars,
        help="characters of text plus bytes of images per prompt (default %(default)s)",
    )
    p.add_argument(
        "--drain-delay-s",
        type=float,
        default=Config().drain_delay_s,
        help="on SIGTERM, seconds to keep answering while health is NOT_SERVING, before new "
        "work is refused (default %(default)s; a second signal ends the delay)",
    )
    p.add_argument(
        "--drain-grace-s", type=float, default=10.0, help="seconds to finish RPCs on SIGTERM"
    )


def _add_edges(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-listen",
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics over HTTP there (default: off; port 0 picks one); "
        "off loopback it needs --auth-token-file, and scrapers send the bearer token",
    )
    p.add_argument(
        "--mcp-listen",
        default=None,
        metavar="HOST:PORT",
        help="serve the sub-agent tools to the agents corral runs over MCP (streamable HTTP, "
        "each agent with its own token) on this loopback address (default: off; port 0 picks "
        "one)",
    )
    p.add_argument(
        "--web-listen",
        default=None,
        metavar="HOST:PORT|off",
        help=f"serve corral.v1 over Connect and gRPC-Web, and the dashboard, there (default "
        f"{DEFAULT_WEB_LISTEN}, or port 0 when --listen's port is 0; 'off' disables it; any "
        "address but loopback needs --auth-token-file)",
    )
    p.add_argument(
        "--web-allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let pages of this origin (e.g. https://app.example.com) call the web port "
        "cross-origin (repeatable; default: only the daemon's own pages)",
    )
    p.add_argument(
        "--standby",
        action="store_true",
        help="if another daemon holds the state directory, wait as a hot standby (health "
        "NOT_SERVING, reflection and GetServerInfo answered, agent calls UNAVAILABLE/STANDBY) "
        "and take over when it stops",
    )
    p.add_argument(
        "--search-index",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep a full-text index of every timeline for SearchTimeline / corral search "
        "(default: on; --no-search-index saves its share of the durable write cost; rows "
        "written while off are indexed in the background when it is turned on again)",
    )


def _add_logging(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="the least severe stderr log lines shown (default %(default)s)",
    )
    p.add_argument(
        "--log-format",
        default="text",
        choices=("text", "json"),
        help="stderr log lines: text, or one JSON object per line (default %(default)s)",
    )


def _add_stream_bounds(p: argparse.ArgumentParser) -> None:
    defaults = Config()
    p.add_argument(
        "--max-streams-per-connection",
        type=int,
        default=defaults.max_streams_per_connection,
        help="concurrent calls one client connection may hold open (default %(default)s)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=defaults.max_connections,
        help="client connections with calls open at once; a call on one more answers "
        "RESOURCE_EXHAUSTED (default %(default)s)",
    )
    p.add_argument(
        "--max-streams",
        type=int,
        default=defaults.max_streams,
        help="Subscribe and StreamTurn calls open at once (default %(default)s)",
    )
    p.add_argument(
        "--streams-total-bytes",
        type=int,
        default=defaults.streams_total_bytes,
        help="bytes all streams may have handed to the transport and not yet written; "
        "past it, writes wait (default %(default)s)",
    )
    p.add_argument(
        "--stream-stall-s",
        type=float,
        default=defaults.stream_stall_s,
        help="a stream whose client has not read for this long is ended with its resume "
        "point (default %(default)s)",
    )


def _add_access(p: argparse.ArgumentParser) -> None:
    access = p.add_argument_group(
        "access",
        "Loopback and unix:PATH need no token by default; any other --listen address "
        "needs --auth-token-file (and should use TLS).",
    )
    access.add_argument(
        "--auth-token-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="bearer tokens, one per line (# comments); every call but health then needs "
        "'authorization: Bearer TOKEN'; SIGHUP reloads the file",
    )
    access.add_argument(
        "--reflection",
        choices=("on", "off", "auto"),
        default="auto",
        help="serve gRPC reflection (needs the token when tokens are on); auto = on only "
        "when listening on loopback (default %(default)s)",
    )
    access.add_argument(
        "--tls-cert",
        type=Path,
        default=None,
        metavar="PEM",
        help="speak only TLS, with this certificate chain (needs --tls-key)",
    )
    access.add_argument(
        "--tls-key", type=Path, default=None, metavar="PEM", help="its unencrypted private key"
    )
    access.add_argument(
        "--tls-client-ca",
        type=Path,
        default=None,
        metavar="PEM",
        help="mutual TLS: require client certificates signed by this authority",
    )


def web_listen(args: argparse.Namespace) -> str | None:
    """The web port's address: --web-listen, None for 'off', or the default (port 0 when
    --listen asks for any port, so test daemons and second daemons do not collide)."""
    if args.web_listen is not None:
        return None if args.web_listen == "off" else str(args.web_listen)
    if unix_path(args.listen) is not None:
        return None  # a daemon kept to one user's socket opens no port unless told to
    if args.listen.rpartition(":")[2] == "0":
        return DEFAULT_WEB_LISTEN.rpartition(":")[0] + ":0"
    return DEFAULT_WEB_LISTEN


def access_error(args: argparse.Namespace) -> str:
    """Why these access flags cannot start a daemon, or "" when they can."""
    web = web_listen(args)
    if web is not None and not is_loopback(web) and args.auth_token_file is None:
        return (
            f"refusing --web-listen {web}: not a loopback address; any other address needs "
            "--auth-token-file FILE (and TLS: --tls-cert/--tls-key)"
        )
    if not is_local(args.listen) and args.auth_token_file is None:
        return (
            f"refusing to listen on {args.listen}: not a loopback address; any other address "
            "needs --auth-token-file FILE (and TLS: --tls-cert/--tls-key)"
        )
    socket_path = unix_path(args.listen)
    if socket_path is not None and (refusal := socket_dir_problem(socket_path)[0]):
        return f"refusing --listen {args.listen}: {refusal}"
    metrics = args.metrics_listen
    if metrics is not None and not is_loopback(metrics) and args.auth_token_file is None:
        return (
            f"refusing --metrics-listen {metrics}: not a loopback address; metrics anywhere "
            "else need --auth-token-file FILE (scrapers then send 'Authorization: Bearer TOKEN')"
        )
    if args.mcp_listen is not None and not is_loopback(args.mcp_listen):
        return f"refusing --mcp-listen {args.mcp_listen}: the MCP tools are served on loopback only"
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together"
    if args.tls_client_ca is not None and args.tls_cert is None:
        return "--tls-client-ca needs --tls-cert and --tls-key"
    try:
        cluster_config(args)
    except ValueError as error:
        return str(error)
    return ""


def reflection_on(choice: str, listen: str) -> bool:
    """`--reflection`: on, off, or auto (on only when listening on loopback or a socket)."""
    return choice == "on" or (choice == "auto" and is_local(listen))


def build_config(
    args: argparse.Namespace, state_dir: Path, providers: tuple[ProviderEntry, ...]
) -> Config:
    """The daemon's Config from its flags (a standby describes itself from it too)."""
    return Config(
        listen=args.listen,
        state_dir=state_dir,
        max_request_bytes=args.max_request_bytes,
        limits=Limits(max_prompt_chars=args.max_prompt_chars),
        max_streams_per_connection=args.max_streams_per_connection,
        max_connections=args.max_connections,
        max_streams=args.max_streams,
        streams_total_bytes=args.streams_total_bytes,
        stream_stall_s=args.stream_stall_s,
        drain_delay_s=args.drain_delay_s,
        auth_token_file=args.auth_token_file,
        tls=TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None,
        reflection=reflection_on(args.reflection, args.listen),
        standby=args.standby,
        lock_state_dir=False,  # `serve` holds it, with the pid of its holder
        metrics_listen=args.metrics_listen,
        metrics_token=args.metrics_listen is not None and not is_loopback(args.metrics_listen),
        providers=providers,
        config_file=args.config,
        mcp_listen=args.mcp_listen,
        web_listen=web_listen(args),
        web_allow_origins=tuple(args.web_allow_origin),
        search_index=args.search_index,
        cluster=cluster_config(args),
    )

"""`corral serve`: arguments, the state-directory lock, signals and the drain.

Refuses to start, with one clear line and exit code, when a flag is bad (2), a port is taken
(2: checked before anything is created, so no state directory is left behind and no drain runs),
the state directory cannot be created or read (2), another daemon holds it (1), a non-loopback
address comes without a token file (2), metrics off loopback come without one (2), a unix:PATH
socket's directory could let another user replace it (2), a token, certificate or key file is
unreadable or empty (2), or the --config providers file cannot be used (2). SIGHUP reloads the
token file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import IO, NoReturn

from corral_server import gc_tuning, logs, reclaim, startup_line
from corral_server.app import SERVICE_NAMES, Config, Daemon
from corral_server.listen import is_local, is_loopback, socket_dir_problem, unix_path
from corral_server.manager.validate import Limits
from corral_server.providers import process_tree, registry
from corral_server.providers.config import ConfigError, ProviderEntry
from corral_server.providers.config import load as load_providers
from corral_server.rpc.auth import TokenFile, TokenFileError
from corral_server.rpc.standby import start_standby_server
from corral_server.rpc.tls import TlsFileError, TlsFiles, server_credentials
from corral_server.server_info import standby_info
from corral_server.store.database import LOCK_FILE
from corral_server.store.errors import StoreError
from corral_server.store.private import make_private

log = logging.getLogger("corral")

DEFAULT_LISTEN = "127.0.0.1:50051"
# The web port (Connect, gRPC-Web, the dashboard): on by default, on loopback, next to gRPC's.
DEFAULT_WEB_LISTEN = "127.0.0.1:50052"
# How often a standby tries the state directory's lock (the takeover's added latency).
STANDBY_POLL_S = 0.05


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "corral"


class _OneLineErrors(argparse.ArgumentParser):
    """A bad flag is one line (not argparse's usage block) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(prog: str = "corral serve") -> argparse.ArgumentParser:
    p = _OneLineErrors(prog=prog, description="Run the corral daemon.")
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
        "one: scripted, and claude-code, codex, gemini, claude-acp when on PATH",
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
        action="store_true",
        help="keep a full-text index of every timeline for SearchTimeline / corral search "
        "(default: off; it costs about half the durable write throughput; rows written while "
        "off are indexed in the background when it is turned on)",
    )
    p.add_argument(
        "--max-streams-per-connection",
        type=int,
        default=Config().max_streams_per_connection,
        help="concurrent calls one client connection may hold open (default %(default)s)",
    )
    _add_stream_bounds(p)
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
    _add_access(p)
    return p


def _add_stream_bounds(p: argparse.ArgumentParser) -> None:
    defaults = Config()
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


class StateDirLocked(RuntimeError):
    pass


def lock_state_dir(state_dir: Path) -> IO[str]:
    """Hold an exclusive lock on the state directory for the daemon's lifetime."""
    make_private(state_dir, LOCK_FILE)  # 0700, and the lock file made 0600 before it is opened
    handle = (state_dir / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StateDirLocked(
            f"another corral daemon (pid {holder}) holds the state directory {state_dir}; "
            "stop it or pass a different --state-dir"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


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
    return ""


def port_taken(listen: str, flag: str = "--listen") -> str:
    """Why `listen` cannot be bound (another process listens there), or "". Checked before
    anything is created; port 0 is always free. Binding with SO_REUSEADDR, as a server
    does, so a port whose old connections linger is not mistaken for a taken one."""
    host, _, port = listen.rpartition(":")
    if port == "0" or not port.isdigit():
        return ""  # port 0 picks a free one; a malformed address fails at bind, as before
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot listen on {listen} ({flag}): {exc.strerror}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return (
                f"cannot listen on {listen} ({flag}): {exc.strerror} "
                "(is another corral daemon running?)"
            )
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
        mcp_listen=args.mcp_listen,
        web_listen=web_listen(args),
        web_allow_origins=tuple(args.web_allow_origin),
        search_index=args.search_index,
    )


async def serve(args: argparse.Namespace) -> int:
    process_tree.become_subreaper()  # orphans of agents come back to us, not to init
    state_dir: Path = args.state_dir or default_state_dir()
    # Before a standby's wait, which replaces --listen's port 0 with the port it bound; the
    # web port binds only when the daemon runs (a standby has none while it waits).
    web = web_listen(args)
    refusal = access_error(args)
    if refusal:
        log.error("%s", refusal)
        return 2
    try:
        providers = registry.with_builtins(load_providers(args.config) if args.config else ())
    except ConfigError as exc:
        log.error("cannot start: %s", exc)
        return 2
    if not is_local(args.listen) and args.tls_cert is None:
        log.warning("listening on %s without TLS: tokens cross the network in clear", args.listen)
    # The web port too, unless a standby: it binds that one only once it takes over.
    taken = port_taken(args.listen) or (
        port_taken(web, "--web-listen") if web and not args.standby else ""
    )
    if taken:
        log.error("cannot start: %s", taken)
        return 2
    made = not _exists(state_dir)  # so a refused start can leave nothing behind
    # What a standby describes itself by too (a daemon that waited gets the port it bound).
    config = build_config(args, state_dir, providers)
    try:
        lock = lock_state_dir(state_dir)
    except OSError as exc:  # not StateDirLocked: the directory cannot be made or read
        log.error("cannot start: the state directory %s: %s", state_dir, exc.strerror or exc)
        return 2
    except StateDirLocked as exc:
        if not args.standby:
            log.error("%s", exc)
            return 1
        try:
            waited = await _wait_as_standby(state_dir, config)
        except (OSError, TokenFileError, TlsFileError) as exc:  # OSError: its address
            log.error("cannot start: %s", exc)
            return 2
        if waited is None:
            return 0  # stopped while waiting
        lock, args.listen = waited
        config = replace(config, listen=args.listen)
    try:
        daemon = Daemon(config)
    except (TokenFileError, TlsFileError, ValueError) as exc:  # ValueError: a bad bound
        log.error("cannot start: %s", exc)
        lock.close()
        _unmake(state_dir, made)
        return 2
    try:
        port = await daemon.start()
    except StoreError as exc:
        log.error("cannot start: %s", exc.message)
        lock.close()
        return 1
    except OSError as exc:  # the port was taken after the check above
        log.error("cannot start: %s (is another corral daemon running?)", exc)
        logging.disable(logging.CRITICAL)  # the store opened: close it, without a drain's lines
        try:
            await daemon.drain(0.0, delay_s=0.0)
        finally:
            logging.disable(logging.NOTSET)
        lock.close()
        return 2
    gc_tuning.tune()
    reclaim.tune_allocator()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Before the start-up line, so whoever waits for it may signal at once.
    loop.add_signal_handler(signal.SIGHUP, daemon.reload_tokens)
    mcp_url = daemon.mcp.url if daemon.mcp is not None else ""
    agents = len(daemon.manager.agents())
    line = startup_line.serving(
        daemon.server_info(), _bound(args.listen, port), state_dir, agents, mcp_url
    )
    print(line, flush=True)
    await stop.wait()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, daemon.skip_drain_delay)
    log.info("draining (delay %.1fs, grace %.1fs)", args.drain_delay_s, args.drain_grace_s)
    await daemon.drain(args.drain_grace_s)
    lock.close()
    log.info("stopped")
    return 0


def _exists(path: Path) -> bool:
    return path.exists()  # before the daemon serves: nothing waits on this loop yet


def _unmake(state_dir: Path, made: bool) -> None:
    """Remove the state directory this start made, if nothing but its lock is in it."""
    if made:
        with contextlib.suppress(OSError):
            (state_dir / LOCK_FILE).unlink()
            state_dir.rmdir()


def _bound(listen: str, port: int) -> str:
    """The address a client uses: unix:PATH as given, or HOST:the bound port."""
    return listen if unix_path(listen) is not None else f"{listen.rsplit(':', 1)[0]}:{port}"


async def _wait_as_standby(state_dir: Path, config: Config) -> tuple[IO[str], str] | None:
    """Serve as a hot standby on `--listen` until the state directory's lock is free: then
    the lock and the address the daemon takes over (the same port, even for port 0). None
    when a signal stopped the wait. It answers health, reflection (if on) and GetServerInfo,
    behind the same tokens as the daemon."""
    credentials = server_credentials(config.tls) if config.tls else None
    tokens = TokenFile(config.auth_token_file) if config.auth_token_file else None
    info = standby_info(config, ("scripted", *(entry.name for entry in config.providers)))
    waiting = await start_standby_server(
        config.listen,
        SERVICE_NAMES,
        credentials,
        info=info,
        tokens=tokens,
        reflection=config.reflection,
    )
    port = waiting.port
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)  # before the line: a signal may follow it at once
    print(startup_line.standby(info, _bound(config.listen, port), state_dir), flush=True)
    try:
        while not stop.is_set():
            try:
                lock = lock_state_dir(state_dir)
            except StateDirLocked:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), STANDBY_POLL_S)
                continue
            log.info("the state directory is free: taking over")
            return lock, _bound(config.listen, port)
        return None
    finally:
        await waiting.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def main(argv: list[str] | None = None, prog: str = "corral serve") -> int:
    args = build_parser(prog).parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main(prog="python -m corral_server.daemon"))

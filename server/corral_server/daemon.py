"""`corral serve`: the start-up checks, the state-directory lock, the standby's wait, signals
and the drain (the flags are serve_flags.py's).

Refuses to start, with one clear line and exit code, when a flag is bad (2), a port is taken
(2: checked before anything is created, so no state directory is left behind and no drain runs),
the state directory cannot be created or read (2), another daemon holds it (1), a non-loopback
address comes without a token file (2), metrics off loopback come without one (2), a unix:PATH
socket's directory could let another user replace it (2), a token, certificate or key file is
unreadable or empty (2), or the --config providers file cannot be used (2). SIGHUP reloads the
token file and the providers file (config_reload.py). SIGTERM or SIGINT (Ctrl-C) stops it at any
point: while it starts (one line, exit 0, what it opened closed), while it waits as a standby, or
while it serves (the drain).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, TypeVar

from corral_server import gc_tuning, logs, reclaim, startup_line
from corral_server.app import SERVICE_NAMES, Config, Daemon
from corral_server.clock import SystemClock
from corral_server.cluster.settings import ClusterStartError
from corral_server.config import standby_info
from corral_server.listen import is_local, is_loopback, port_taken, unix_path
from corral_server.providers import process_tree, registry
from corral_server.providers.config import ConfigError, ProviderEntry
from corral_server.providers.config import load as load_providers
from corral_server.rpc.auth import TokenFile, TokenFileError
from corral_server.rpc.standby import start_standby_server
from corral_server.rpc.tls import TlsFileError, server_credentials
from corral_server.serve_flags import (
    access_error,
    build_config,
    build_parser,
    reflection_on,
    web_listen,
)
from corral_server.state_lock import StateDirLocked, lock_state_dir
from corral_server.store.database import LOCK_FILE
from corral_server.store.errors import StoreError

# What tests and the CLI take from here (the parser and the loopback rule with it).
__all__ = ["build_parser", "is_loopback", "main", "reflection_on", "serve"]

log = logging.getLogger("corral")
T = TypeVar("T")

# How often a standby tries the state directory's lock (the takeover's added latency).
STANDBY_POLL_S = 0.05


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "corral"


async def serve(args: argparse.Namespace) -> int:
    process_tree.become_subreaper()  # orphans of agents come back to us, not to init
    stop = _stop_on_signals()
    state_dir: Path = args.state_dir or default_state_dir()
    providers = _checked(args)
    if isinstance(providers, int):
        return providers
    made = not _exists(state_dir)  # so a refused start can leave nothing behind
    # What a standby describes itself by too (a daemon that waited gets the port it bound).
    config = build_config(args, state_dir, providers)
    held = await _hold_state_dir(args, state_dir, config, stop)
    if isinstance(held, int):
        return held
    lock, config = held
    gc_tuning.tune()  # before the stored agents are restored
    started = await _start(config, lock, state_dir, made, stop)
    if isinstance(started, int):
        return started
    daemon, port = started
    await _serve_until_signalled(args, config, daemon, port, stop)
    lock.close()
    log.info("stopped")
    return 0


def _checked(args: argparse.Namespace) -> tuple[ProviderEntry, ...] | int:
    """The providers to run, or the exit code of a start these flags refuse (its one line
    logged). Before anything is created."""
    # Before a standby's wait, which replaces --listen's port 0 with the port it bound; the
    # web port binds only when the daemon runs (a standby has none while it waits).
    web = web_listen(args)
    refusal = access_error(args)
    if refusal:
        log.error("%s", refusal)
        return 2
    try:
        providers = registry.with_builtins(load_providers(args.config) if args.config else ())
        built = registry.build(providers, SystemClock())
        registry.check_defaults(providers, built, str(args.config or "the built-in providers"))
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
    return providers


def _stop_on_signals() -> asyncio.Event:
    """An event SIGTERM and SIGINT set, from the start on: without it a Ctrl-C before the
    daemon serves would cancel the start-up wherever it was and end in a traceback."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event) -> T | None:
    """`work`'s result, or None when `stop` was set first (then `work` is cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):  # it is being abandoned
        await task
    return None


async def _close_quietly(daemon: Daemon) -> None:
    """Close what a start-up that did not finish opened (the store), without a drain's lines."""
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(daemon.drain(0.0, delay_s=0.0), 10.0)
    finally:
        logging.disable(logging.NOTSET)


async def _hold_state_dir(
    args: argparse.Namespace, state_dir: Path, config: Config, stop: asyncio.Event
) -> tuple[IO[str], Config] | int:
    """The state directory's lock and the config to run with (a standby waits for the lock
    first, and keeps the address it bound), or the exit code."""
    try:
        return lock_state_dir(state_dir), config
    except OSError as exc:  # not StateDirLocked: the directory cannot be made or read
        log.error("cannot start: the state directory %s: %s", state_dir, exc.strerror or exc)
        return 2
    except StateDirLocked as exc:
        if not args.standby:
            log.error("%s", exc)
            return 1
    try:
        waited = await _wait_as_standby(state_dir, config, stop)
    except (OSError, TokenFileError, TlsFileError) as exc:  # OSError: its address
        log.error("cannot start: %s", exc)
        return 2
    if waited is None:
        return 0  # stopped while waiting
    lock, listen = waited
    return lock, replace(config, listen=listen)


async def _start(
    config: Config, lock: IO[str], state_dir: Path, made: bool, stop: asyncio.Event
) -> tuple[Daemon, int] | int:
    """The daemon, serving, and its port; or the exit code (the lock released). A signal
    before it serves ends the start-up where it is: 0, with one line."""
    try:
        daemon = Daemon(config)
    except (TokenFileError, TlsFileError, ValueError) as exc:  # ValueError: a bad bound
        log.error("cannot start: %s", exc)
        lock.close()
        _unmake(state_dir, made)
        return 2
    try:
        port = await _unless_stopped(daemon.start(), stop)
    except StoreError as exc:
        log.error("cannot start: %s", exc.message)
        lock.close()
        return 1
    except ClusterStartError as exc:  # no NATS server answered; the node id is taken
        log.error("cannot start: %s", exc)
        await _close_quietly(daemon)
        lock.close()
        return 1
    except TimeoutError as exc:  # an OSError too: a NATS request unanswered, not a port
        log.error("cannot start: the NATS cluster did not answer in time (%r)", exc)
        await _close_quietly(daemon)
        lock.close()
        return 1
    except OSError as exc:  # the port was taken after the check above
        log.error("cannot start: %s (is another corral daemon running?)", exc)
        await _close_quietly(daemon)  # the store opened
        lock.close()
        return 2
    if port is None or stop.is_set():
        log.info("stopped by a signal during start-up")
        await _close_quietly(daemon)
        lock.close()
        return 0
    return daemon, port


async def _serve_until_signalled(
    args: argparse.Namespace, config: Config, daemon: Daemon, port: int, stop: asyncio.Event
) -> None:
    """Serve until SIGTERM or SIGINT (`stop`), then drain (a second signal ends the drain's
    delay)."""
    gc_tuning.settle()
    reclaim.tune_allocator()
    loop = asyncio.get_running_loop()
    # Before the start-up line, so whoever waits for it may signal at once.
    loop.add_signal_handler(signal.SIGHUP, daemon.on_sighup)
    mcp_url = daemon.mcp.url if daemon.mcp is not None else ""
    agents = len(daemon.manager.directory.agents())
    line = startup_line.serving(
        daemon.server_info(), _bound(config.listen, port), config.state_dir, agents, mcp_url
    )
    print(line, flush=True)
    await stop.wait()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, daemon.skip_drain_delay)
    log.info("draining (delay %.1fs, grace %.1fs)", args.drain_delay_s, args.drain_grace_s)
    await daemon.drain(args.drain_grace_s)


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


async def _wait_as_standby(
    state_dir: Path, config: Config, stop: asyncio.Event
) -> tuple[IO[str], str] | None:
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


def main(argv: list[str] | None = None, prog: str = "corral serve") -> int:
    args = build_parser(prog).parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main(prog="python -m corral_server.daemon"))

"""Reloading the providers file of `corral serve --config FILE` while the daemon runs
(docs/design.md#live-config): on SIGHUP, and when a stat poll on the daemon's clock sees the
file change.

A reload reads and checks the whole file in a thread; a file that cannot be used keeps the
configuration running and logs one line naming the file, table and key. A usable one is
compared with the running entries, provider by provider, by two signatures: what the process
starts with (kind, command, environment, codex settings, the scripted switches), whose change
makes a new provider the agents restart with at their next idle moment, and the model and mode
defaults, changed in place on the live agents still on the old ones (manager/live_config.py).
Reloads run one at a time, each against the entries the previous one left: two reloads of one
change restart no agent twice. Each logs one line saying what changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

from corral_server.clock import Clock
from corral_server.manager.live_config import LiveOutcome, ProviderChange
from corral_server.manager.specs import Defaults
from corral_server.providers import registry
from corral_server.providers.base import Provider
from corral_server.providers.config import ConfigError, ProviderEntry
from corral_server.providers.config import load as load_providers

if TYPE_CHECKING:
    from corral_server.config import Config
    from corral_server.manager.manager import AgentManager

log = logging.getLogger("corral")

# How often the file is stat'ed for a change (on the daemon's clock).
POLL_S = 1.0

Entries = tuple[ProviderEntry, ...]
# The providers of a set of entries (built, not started), and where changes go.
Build = Callable[[Entries], Mapping[str, Provider]]
Apply = Callable[[Mapping[str, ProviderChange], tuple[str, ...]], Awaitable[LiveOutcome]]


def restart_signature(entry: ProviderEntry) -> tuple[object, ...]:
    """What the agent's process is started with: a change restarts it."""
    env = tuple(sorted(entry.env.items()))
    switches = (entry.steer, entry.live_settings)
    return (entry.kind, entry.command, env, entry.inherit_env, entry.codex_config, switches)


def defaults_of(entry: ProviderEntry) -> Defaults:
    """What a running session can change: applied in place."""
    return Defaults(entry.model, entry.mode)


def changes_between(
    old: Entries, new: Entries, built: Mapping[str, Provider]
) -> tuple[dict[str, ProviderChange], tuple[str, ...]]:
    """The changed (or added) providers by name, and the names the new entries dropped."""
    before = {entry.name: entry for entry in old}
    changes: dict[str, ProviderChange] = {}
    for entry in new:
        was = before.pop(entry.name, None)
        restart = was is None or restart_signature(was) != restart_signature(entry)
        old_defaults = Defaults() if was is None else defaults_of(was)
        if restart or old_defaults != defaults_of(entry):
            provider = built[entry.name] if restart else None
            changes[entry.name] = ProviderChange(provider, old_defaults, defaults_of(entry))
    return changes, tuple(before)


def reloader_for(
    config: Config,
    clock: Clock,
    build: Build,
    providers: MutableMapping[str, Provider],
    manager: Callable[[], AgentManager],
) -> ConfigReloader | None:
    """The daemon's reloader (None without a providers file): a change replaces the daemon's
    providers by name (`providers`, what GetServerInfo lists) and goes to its manager."""
    if config.config_file is None:
        return None

    async def apply(changes: Mapping[str, ProviderChange], removed: tuple[str, ...]) -> LiveOutcome:
        for name in removed:
            providers.pop(name, None)
        for name, change in changes.items():
            if change.provider is not None:
                providers[name] = change.provider
        return await manager().apply_providers(changes, removed)

    return ConfigReloader(config.config_file, config.providers, clock, build, apply)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a changed file: its mtime, size and inode (None: it is not there)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ConfigReloader:
    def __init__(
        self, path: Path, entries: Entries, clock: Clock, build: Build, apply: Apply
    ) -> None:
        self.path = path
        self._entries = entries  # the running configuration
        self._clock = clock
        self._build = build
        self._apply = apply
        self._lock = asyncio.Lock()  # one reload at a time
        self._stamp: tuple[int, int, int] | None = None
        self._tasks: set[asyncio.Task[bool]] = set()
        self._watch: asyncio.Task[None] | None = None
        # Reloads since start, by outcome ("applied", "unchanged", "refused"), for metrics.
        self.counts: dict[str, int] = {"applied": 0, "unchanged": 0, "refused": 0}

    def request(self, why: str) -> None:
        """Reload soon (a signal handler: it must not wait)."""
        task = asyncio.get_running_loop().create_task(self.reload(why))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        """Note the file as it is, then watch it."""
        self._stamp = await asyncio.to_thread(_stamp, self.path)
        self._watch = asyncio.get_running_loop().create_task(self._poll(), name="config-watch")

    async def stop(self) -> None:
        for task in (self._watch, *self._tasks):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._watch = None

    async def _poll(self) -> None:
        while True:
            await self._clock.sleep(POLL_S)
            if await asyncio.to_thread(_stamp, self.path) != self._stamp:
                await self.reload("the file changed")

    async def reload(self, why: str) -> bool:
        """Read the file again and apply what changed; False when it cannot be used (the
        configuration running is kept)."""
        async with self._lock:
            self._stamp = await asyncio.to_thread(_stamp, self.path)  # a bad file logs once
            try:
                entries = registry.with_builtins(await asyncio.to_thread(load_providers, self.path))
                built = self._build(entries)
                registry.check_defaults(entries, built, str(self.path))
            except ConfigError as exc:
                self.counts["refused"] += 1
                log.error("config reload (%s) refused, the previous one is kept: %s", why, exc)
                return False
            changes, removed = changes_between(self._entries, entries, built)
            self._entries = entries
            if not changes and not removed:
                self.counts["unchanged"] += 1
                log.info("config reloaded from %s (%s): nothing changed", self.path, why)
                return True
            outcome = await self._apply(changes, removed)
            self.counts["applied"] += 1
            log.info(
                "config reloaded from %s (%s): %s", self.path, why, _said(changes, removed, outcome)
            )
            return True


def _said(
    changes: Mapping[str, ProviderChange], removed: tuple[str, ...], outcome: LiveOutcome
) -> str:
    parts = [
        f"{name} ({'restart' if change.provider is not None else 'model/mode'})"
        for name, change in changes.items()
    ]
    said = f"providers changed: {', '.join(parts) or 'none'}"
    if removed:
        said += f"; removed (their live agents keep running): {', '.join(removed)}"
    said += f"; agents restarting when idle: {', '.join(outcome.restarting) or 'none'}"
    said += f"; changed in place: {', '.join(outcome.changed) or 'none'}"
    if outcome.refused:
        said += f"; refused: {'; '.join(outcome.refused)}"
    return said

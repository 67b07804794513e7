"""Which providers a daemon runs: the built-in entries, and kind -> constructor.

`corral serve` builds `with_builtins(entries of its --config file)`: `scripted` always, then
`claude-code`, `codex`, `gemini` and `claude-acp` (each usable when its program is on PATH), and
the file's entries, an entry of a built-in's name replacing it. `build` makes the providers.

This module must not start any program: a provider starts its program per session (one whose
program is missing is listed unavailable, with the reason).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from corral_server.clock import Clock
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.base import Provider
from corral_server.providers.claude_code import ClaudeCodeProvider
from corral_server.providers.codex import CodexProvider
from corral_server.providers.config import ConfigError, ProviderEntry
from corral_server.providers.scripted_provider import ScriptedProvider

# Usable without a config file when their programs are on PATH; a config entry of the same
# name replaces one. (`scripted` is not among them: it is always there, and not replaceable.)
BUILTIN_ENTRIES: tuple[ProviderEntry, ...] = (
    ProviderEntry("claude-code", "claude-code", ("claude",)),
    ProviderEntry("codex", "codex", ("codex",)),
    ProviderEntry("gemini", "acp", ("gemini", "--acp")),
    ProviderEntry("claude-acp", "acp", ("claude-agent-acp",)),
)


def with_builtins(entries: Iterable[ProviderEntry]) -> tuple[ProviderEntry, ...]:
    """The built-in entries, each replaced by a given entry of its name, then the other
    given entries in their order."""
    given = {entry.name: entry for entry in entries}
    merged = [given.pop(builtin.name, builtin) for builtin in BUILTIN_ENTRIES]
    return (*merged, *given.values())


def build(
    entries: Iterable[ProviderEntry], clock: Clock, environ: Mapping[str, str] | None = None
) -> dict[str, Provider]:
    """`scripted`, then one provider per entry (by name, in order). `environ` is what an
    entry's `env` is merged over (default: the daemon's environment)."""
    base = dict(os.environ if environ is None else environ)
    providers: dict[str, Provider] = {"scripted": ScriptedProvider(clock)}
    for entry in entries:
        providers[entry.name] = _make(entry, clock, base)
    return providers


def check_defaults(
    entries: Iterable[ProviderEntry], providers: Mapping[str, Provider], source: str
) -> None:
    """An entry's `model` and `mode` must be ones its provider lists (when it lists any).
    Raises ConfigError naming the file (`source`), the table and the key."""
    for entry in entries:
        provider = providers.get(entry.name)
        if provider is None:
            continue
        info = provider.info()
        for key, value, choices in (
            ("model", entry.model, [m.id for m in info.models]),
            ("mode", entry.mode, [m.id for m in info.modes]),
        ):
            if value and choices and value not in choices:
                raise ConfigError(
                    f"{source}: [providers.{entry.name}]: unknown {key} {value!r} (one of "
                    f"{', '.join(choices)})"
                )


def _make(entry: ProviderEntry, clock: Clock, environ: Mapping[str, str]) -> Provider:
    env = {**environ, **entry.env} if entry.inherit_env else dict(entry.env)
    argv = list(entry.command)
    match entry.kind:
        case "scripted":
            return ScriptedProvider(
                clock, name=entry.name, can_steer=entry.steer, live_settings=entry.live_settings
            )
        case "acp":
            return AcpProvider(argv, env, name=entry.name)
        case "claude-code":
            return ClaudeCodeProvider(argv, env, name=entry.name, ask_title=True)
        case "codex":
            for key, value in entry.codex_config:  # before the adapter's `app-server`
                argv += ["-c", f"{key}={value}"]
            return CodexProvider(argv, env, name=entry.name, clock=clock)
        case _:
            # config.py admits only KINDS; a new kind needs its factory here.
            raise ValueError(f"provider {entry.name!r}: no factory for kind {entry.kind!r}")

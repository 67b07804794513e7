"""Which providers a daemon runs: the built-in entries, and kind -> constructor.

`corral serve` builds `with_builtins(entries of its --config file)`: `scripted` always, then
`claude-code`, `codex`, `gemini` and `claude-acp` (each usable when its program is on PATH), and
the file's entries, an entry of a built-in's name replacing it. `build` makes the providers.

A kind whose adapter is not in this build (its module is missing) becomes an
`UnavailableProvider`: listed, with the reason, never an ImportError at start-up. The adapter
modules are imported inside the factories for that reason. This module must not start any
program: a provider starts its program per session.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import NoReturn

from corral_server.clock import Clock
from corral_server.domain.content import Prompt
from corral_server.errors import FailedPrecondition
from corral_server.providers.acp import AcpProvider
from corral_server.providers.base import EventSink, Provider, ProviderInfo, SessionConfig
from corral_server.providers.config import ProviderEntry
from corral_server.providers.scripted import ScriptedProvider

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


def _make(entry: ProviderEntry, clock: Clock, environ: Mapping[str, str]) -> Provider:
    env = {**environ, **entry.env} if entry.inherit_env else dict(entry.env)
    argv = list(entry.command)
    match entry.kind:
        case "scripted":
            return ScriptedProvider(clock, name=entry.name)
        case "acp":
            return AcpProvider(argv, env, name=entry.name)
        case "claude-code":
            return _claude_code(entry, argv, env)
        case "codex":
            for key, value in entry.codex_config:  # before the adapter's `app-server`
                argv += ["-c", f"{key}={value}"]
            return _codex(entry, argv, env)
        case _:
            # config.py admits only KINDS; a new kind needs its factory here.
            raise ValueError(f"provider {entry.name!r}: no factory for kind {entry.kind!r}")


def _claude_code(entry: ProviderEntry, argv: Sequence[str], env: Mapping[str, str]) -> Provider:
    try:
        # Not on main yet: without the module the kind is listed unavailable (see above).
        from corral_server.providers.claude_code import ClaudeCodeProvider  # type: ignore[import-not-found, unused-ignore]
    except ModuleNotFoundError as exc:
        if exc.name != "corral_server.providers.claude_code":
            raise
        return UnavailableProvider(entry.name, entry.kind)
    provider: Provider = ClaudeCodeProvider(argv, env, name=entry.name)
    return provider


def _codex(entry: ProviderEntry, argv: Sequence[str], env: Mapping[str, str]) -> Provider:
    try:
        # Not on main yet: without the module the kind is listed unavailable (see above).
        from corral_server.providers.codex import CodexProvider  # type: ignore[import-not-found, unused-ignore]
    except ModuleNotFoundError as exc:
        if exc.name != "corral_server.providers.codex":
            raise
        return UnavailableProvider(entry.name, entry.kind)
    provider: Provider = CodexProvider(argv, env, name=entry.name)
    return provider


class UnavailableProvider:
    """A provider of a kind this build has no adapter for: listed as unavailable, and never
    asked for a session (the manager refuses CreateAgent on an unavailable provider)."""

    def __init__(self, name: str, kind: str) -> None:
        self._name = name
        self._kind = kind

    @property
    def name(self) -> str:
        return self._name

    @property
    def reason(self) -> str:
        return f"kind {self._kind} is not available in this build"

    def info(self) -> ProviderInfo:
        return ProviderInfo(self._name, self._kind, False, self.reason)

    def validate_prompt(self, prompt: Prompt) -> None:
        return None

    async def create_session(self, config: SessionConfig, sink: EventSink) -> NoReturn:
        raise FailedPrecondition(
            f"provider {self._name!r} is unavailable: {self.reason}",
            metadata={"provider": self._name, "unavailable_reason": self.reason},
        )

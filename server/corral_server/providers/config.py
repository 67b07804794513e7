"""The providers file of `corral serve --config FILE`: TOML, read with the standard library.

    [providers.NAME]
    kind = "acp"                      # scripted | acp | claude-code | codex
    command = ["my-agent", "--acp"]   # the program and its arguments
    env = { API_KEY = "..." }         # merged over the daemon's environment
    inherit_env = true                # false: the program sees only `env`
    model = "..."                     # the model (mode) an agent gets when CreateAgent names
    mode = "..."                      #   none; a reload changes live agents on the old one

This module owns the file's grammar and turns it into plain `ProviderEntry` values; every
mistake (an unreadable file, bad TOML, an unknown kind or key, a wrong type) is a
`ConfigError` whose one-line message names the file, the table and the key. It must not build
providers (registry.py does) nor import grpc. docs/providers.md is the user's reference.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("scripted", "acp", "claude-code", "codex")
# Which keys each kind takes, besides `kind`. A command kind without `command` runs the default
# program of its kind (acp has none: it must name one).
_COMMAND_KEYS = ("command", "env", "inherit_env", "model", "mode")
KEYS: Mapping[str, tuple[str, ...]] = {
    "scripted": ("steer", "live_settings", "model", "mode"),
    "acp": _COMMAND_KEYS,
    "claude-code": _COMMAND_KEYS,
    "codex": (*_COMMAND_KEYS, "config"),
}
DEFAULT_COMMANDS: Mapping[str, tuple[str, ...]] = {
    "claude-code": ("claude",),
    "codex": ("codex",),
}
# Provider names as CreateAgent's `provider` field takes them.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CODEX_KEY = re.compile(r"[A-Za-z0-9_.-]+")


class ConfigError(ValueError):
    """The providers file cannot be used; the message is one line for the operator."""


@dataclass(frozen=True, slots=True)
class ProviderEntry:
    """One provider to build: a `[providers.NAME]` table, or a built-in."""

    name: str
    kind: str
    command: tuple[str, ...] = ()
    # Set over the daemon's environment (or alone, when inherit_env is false).
    env: Mapping[str, str] = field(default_factory=dict)
    inherit_env: bool = True
    # codex only: `-c KEY=VALUE` overrides (VALUE as a TOML literal), in file order.
    codex_config: tuple[tuple[str, str], ...] = ()
    # scripted only: the provider takes steered prompts into the running turn.
    steer: bool = False
    # The model and mode of an agent whose CreateAgent names none ("": the provider's own);
    # a reload applies a change to live agents in place (docs/design.md#live-config).
    model: str = ""
    mode: str = ""
    # scripted only: false makes its sessions refuse live model and mode changes.
    live_settings: bool = True


def load(path: Path) -> tuple[ProviderEntry, ...]:
    """The entries of the providers file at `path`, in file order. Raises ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{path}: cannot read the providers file: {reason}") from None
    return parse(text, str(path))


def parse(text: str, source: str = "<config>") -> tuple[ProviderEntry, ...]:
    """The entries of a providers file's text (`source` names it in errors)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    for key in doc:
        if key != "providers":
            raise ConfigError(
                f"{source}: unknown top-level key {key!r} (the file holds [providers.NAME] tables)"
            )
    providers = doc.get("providers", {})
    if not isinstance(providers, dict):
        raise ConfigError(f"{source}: 'providers' must be a table of [providers.NAME] tables")
    return tuple(_entry(source, name, table) for name, table in providers.items())


def _entry(source: str, name: str, table: Any) -> ProviderEntry:
    where = f"{source}: [providers.{name}]"
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: a provider name is 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if name == "scripted":
        raise ConfigError(f"{where}: the name 'scripted' is the built-in scripted provider's")
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    kind = table.get("kind")
    if kind is None:
        raise ConfigError(f"{where}: 'kind' is required (one of {', '.join(KINDS)})")
    if kind not in KINDS:
        raise ConfigError(f"{where}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
    allowed = KEYS[kind]
    for key in table:
        if key != "kind" and key not in allowed:
            takes = ", ".join(("kind", *allowed))
            raise ConfigError(f"{where}: unknown key {key!r} (kind {kind} takes: {takes})")
    model = _string(where, "model", table.get("model", ""))
    mode = _string(where, "mode", table.get("mode", ""))
    if kind == "scripted":
        return ProviderEntry(
            name,
            kind,
            steer=_bool(where, "steer", table.get("steer", False)),
            model=model,
            mode=mode,
            live_settings=_bool(where, "live_settings", table.get("live_settings", True)),
        )
    command = _command(where, kind, table.get("command"))
    return ProviderEntry(
        name,
        kind,
        command,
        env=_env(where, table.get("env", {})),
        inherit_env=_bool(where, "inherit_env", table.get("inherit_env", True)),
        codex_config=_codex_config(where, table.get("config", {})),
        model=model,
        mode=mode,
    )


def _command(where: str, kind: str, value: Any) -> tuple[str, ...]:
    if value is None:
        default = DEFAULT_COMMANDS.get(kind)
        if default is None:
            raise ConfigError(f"{where}: 'command' is required for kind {kind}")
        return default
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(arg, str) for arg in value)
        or not value[0]
    ):
        raise ConfigError(
            f"{where}: 'command' must be a non-empty list of strings, e.g. ['my-agent', '--acp']"
        )
    return tuple(value)


def _env(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: 'env' must be a table of strings, e.g. {{ KEY = \"value\" }}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise ConfigError(f"{where}: env.{key} must be a string, not {_type(item)}")
        if not key or "=" in key or "\0" in key or "\0" in item:
            raise ConfigError(f"{where}: env.{key}: not a usable environment variable")
    return dict(value)


def _string(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > 256 or "\0" in value:
        raise ConfigError(f"{where}: '{key}' must be a string (at most 256 characters)")
    return value


def _bool(where: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: '{key}' must be true or false, not {_type(value)}")
    return value


def _codex_config(where: str, value: Any) -> tuple[tuple[str, str], ...]:
    """`config = { model = "o3", "model_providers.x.base_url" = "..." }` -> `-c` pairs."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: 'config' must be a table of codex settings")
    pairs = []
    for key, item in value.items():
        if not _CODEX_KEY.fullmatch(key):
            raise ConfigError(f"{where}: config.{key}: a codex setting is a dotted key")
        pairs.append((key, _toml_literal(f"{where}: config.{key}", item)))
    return tuple(pairs)


def _toml_literal(where: str, value: Any) -> str:
    """A string, number, boolean or array of those, as TOML (JSON's spelling is TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str | int | float):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_literal(where, item) for item in value) + "]"
    raise ConfigError(f"{where}: must be a string, number, boolean or array, not {_type(value)}")


def _type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}
    names |= {list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__)

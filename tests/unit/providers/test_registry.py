"""The provider registry: built-in entries, and kind -> constructor."""

from __future__ import annotations

import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

import pytest

from corral_server.clock import FakeClock
from corral_server.providers import registry
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.config import ProviderEntry, parse
from corral_server.providers.registry import (
    BUILTIN_ENTRIES,
    build,
    with_builtins,
)
from corral_server.providers.scripted_provider import ScriptedProvider

ADAPTERS = {
    "claude-code": ("corral_server.providers.claude_code", "ClaudeCodeProvider"),
    "codex": ("corral_server.providers.codex", "CodexProvider"),
}


def test_the_builtins_are_claude_code_codex_gemini_and_claude_acp() -> None:
    assert [(e.name, e.kind, e.command) for e in with_builtins(())] == [
        ("claude-code", "claude-code", ("claude",)),
        ("codex", "codex", ("codex",)),
        ("gemini", "acp", ("gemini", "--acp")),
        ("claude-acp", "acp", ("claude-agent-acp",)),
    ]
    assert with_builtins(()) == BUILTIN_ENTRIES


def test_an_entry_of_a_builtins_name_replaces_it_and_others_follow_in_order() -> None:
    mine = ProviderEntry("gemini", "acp", ("/opt/gemini", "--acp"), env={"K": "v"})
    extra = ProviderEntry("zeta", "scripted")
    alpha = ProviderEntry("alpha", "acp", ("alpha",))
    entries = with_builtins((extra, mine, alpha))
    assert [e.name for e in entries] == [
        "claude-code",
        "codex",
        "gemini",
        "claude-acp",
        "zeta",
        "alpha",
    ]
    assert entries[2] is mine


def test_scripted_is_always_built_first_and_a_scripted_entry_is_another_scripted() -> None:
    providers = build([ProviderEntry("demo", "scripted")], FakeClock(), environ={})
    assert list(providers) == ["scripted", "demo"]
    assert isinstance(providers["demo"], ScriptedProvider)
    assert providers["demo"].name == "demo" and providers["demo"].info().available
    assert not providers["demo"].info().can_steer and not providers["scripted"].info().can_steer


def test_a_scripted_entry_with_steer_takes_steered_prompts() -> None:
    [entry] = parse('[providers.steering]\nkind = "scripted"\nsteer = true\n')
    providers = build([entry], FakeClock(), environ={})
    assert providers["steering"].info().can_steer


def executable(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_an_acp_entry_is_available_when_its_program_is_on_the_daemons_path(tmp_path: Path) -> None:
    executable(tmp_path / "bin", "my-agent")
    entries = parse("[providers.mine]\nkind = 'acp'\ncommand = ['my-agent', '--acp']")
    provider = build(entries, FakeClock(), environ={"PATH": str(tmp_path / "bin")})["mine"]
    assert isinstance(provider, AcpProvider)
    info = provider.info()
    assert (info.name, info.kind, info.available, info.unavailable_reason) == (
        "mine",
        "acp",
        True,
        "",
    )


def test_an_entrys_env_is_merged_over_the_daemons(tmp_path: Path) -> None:
    executable(tmp_path / "own", "my-agent")
    own = tmp_path / "own"
    entries = parse(f"[providers.mine]\nkind = 'acp'\ncommand = ['my-agent']\nenv.PATH = '{own}'")
    environ = {"PATH": str(tmp_path / "empty")}
    assert build(entries, FakeClock(), environ=environ)["mine"].info().available


def test_an_acp_entry_whose_program_is_missing_is_unavailable_with_the_reason(
    tmp_path: Path,
) -> None:
    entries = parse("[providers.mine]\nkind = 'acp'\ncommand = ['no-such-agent']")
    info = build(entries, FakeClock(), environ={"PATH": str(tmp_path)})["mine"].info()
    assert (info.available, info.unavailable_reason) == (False, "no-such-agent not found")


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_each_kind_builds_its_adapter_listed_unavailable_when_its_program_is_missing(
    kind: str, tmp_path: Path
) -> None:
    module, cls = ADAPTERS[kind]
    entry = ProviderEntry("mine", kind, ("no-such-prog",))
    provider = build([entry], FakeClock(), environ={"PATH": str(tmp_path)})["mine"]
    assert type(provider).__name__ == cls and type(provider).__module__ == module
    info = provider.info()
    assert (info.name, info.kind, info.available) == ("mine", kind, False)
    assert info.unavailable_reason == "no-such-prog not found"


class Recorded:
    """Stands in for an adapter class: records how the registry constructed it."""

    made: list[tuple[list[str], dict[str, str], str]] = []

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        name: str,
        clock: object = None,
        ask_title: bool = False,
    ) -> None:
        self.made.append((list(argv), dict(env), name))
        self.clock = clock
        self.ask_title = ask_title


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_an_adapter_in_the_build_gets_argv_env_and_name(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cls = ADAPTERS[kind]
    recorded = cast(type[Recorded], type("Recorded", (Recorded,), {"made": []}))
    monkeypatch.setattr(registry, cls, recorded)
    clock = FakeClock()
    extra = "\nconfig = { model = 'o3', retries = 0 }" if kind == "codex" else ""
    text = f"[providers.mine]\nkind = '{kind}'\ncommand = ['/opt/x']\nenv = {{ K = 'v' }}{extra}"
    provider = build(parse(text), clock, environ={"HOME": "/h", "K": "old"})["mine"]
    assert isinstance(provider, Recorded)
    assert provider.clock is (clock if kind == "codex" else None)
    # The daemon's Claude Code asks a new session for its title (docs/design.md#titles).
    assert provider.ask_title is (kind == "claude-code")
    argv = ["/opt/x", "-c", 'model="o3"', "-c", "retries=0"] if kind == "codex" else ["/opt/x"]
    assert recorded.made == [(argv, {"HOME": "/h", "K": "v"}, "mine")]


def test_inherit_env_false_gives_the_program_only_its_own_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorded = cast(type[Recorded], type("Recorded", (Recorded,), {"made": []}))
    monkeypatch.setattr(registry, "CodexProvider", recorded)
    text = "[providers.c]\nkind = 'codex'\ninherit_env = false\nenv = { CODEX_HOME = '/c' }"
    build(parse(text), FakeClock(), environ={"HOME": "/h", "SECRET": "s"})
    assert recorded.made == [(["codex"], {"CODEX_HOME": "/c"}, "c")]

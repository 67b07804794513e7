"""The provider registry: built-in entries, kind -> constructor, and kinds whose adapter is not
in the build (listed unavailable, never an ImportError)."""

from __future__ import annotations

import stat
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from corral_server.clock import FakeClock
from corral_server.errors import FailedPrecondition
from corral_server.providers.acp import AcpProvider
from corral_server.providers.base import SessionConfig
from corral_server.providers.config import ProviderEntry, parse
from corral_server.providers.registry import (
    BUILTIN_ENTRIES,
    UnavailableProvider,
    build,
    with_builtins,
)
from corral_server.providers.scripted import ScriptedProvider

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
def test_a_kind_whose_adapter_is_not_in_the_build_is_listed_unavailable(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, _ = ADAPTERS[kind]
    monkeypatch.setitem(sys.modules, module, None)  # importing it fails as if it were absent
    provider = build([ProviderEntry("mine", kind, ("prog",))], FakeClock(), environ={})["mine"]
    assert isinstance(provider, UnavailableProvider)
    info = provider.info()
    assert (info.name, info.kind, info.available) == ("mine", kind, False)
    assert info.unavailable_reason == f"kind {kind} is not available in this build"


class Recorded:
    """Stands in for an adapter class: records how the registry constructed it."""

    made: list[tuple[list[str], dict[str, str], str]] = []

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, name: str) -> None:
        self.made.append((list(argv), dict(env), name))


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_an_adapter_in_the_build_gets_argv_env_and_name(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, cls = ADAPTERS[kind]
    fake = types.ModuleType(module)
    recorded = type("Recorded", (Recorded,), {"made": []})
    setattr(fake, cls, recorded)
    monkeypatch.setitem(sys.modules, module, fake)
    extra = "\nconfig = { model = 'o3', retries = 0 }" if kind == "codex" else ""
    text = f"[providers.mine]\nkind = '{kind}'\ncommand = ['/opt/x']\nenv = {{ K = 'v' }}{extra}"
    provider = build(parse(text), FakeClock(), environ={"HOME": "/h", "K": "old"})["mine"]
    assert isinstance(provider, recorded)
    argv = ["/opt/x", "-c", 'model="o3"', "-c", "retries=0"] if kind == "codex" else ["/opt/x"]
    assert recorded.made == [(argv, {"HOME": "/h", "K": "v"}, "mine")]


def test_inherit_env_false_gives_the_program_only_its_own_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module, cls = ADAPTERS["codex"]
    fake = types.ModuleType(module)
    recorded = type("Recorded", (Recorded,), {"made": []})
    setattr(fake, cls, recorded)
    monkeypatch.setitem(sys.modules, module, fake)
    text = "[providers.c]\nkind = 'codex'\ninherit_env = false\nenv = { CODEX_HOME = '/c' }"
    build(parse(text), FakeClock(), environ={"HOME": "/h", "SECRET": "s"})
    assert recorded.made == [(["codex"], {"CODEX_HOME": "/c"}, "c")]


async def test_an_unavailable_provider_never_opens_a_session() -> None:
    provider = UnavailableProvider("mine", "codex")
    with pytest.raises(FailedPrecondition) as info:
        await provider.create_session(SessionConfig("a1", "/tmp"), lambda _: None)
    assert info.value.message == (
        "provider 'mine' is unavailable: kind codex is not available in this build"
    )
    assert info.value.metadata == {
        "provider": "mine",
        "unavailable_reason": "kind codex is not available in this build",
    }

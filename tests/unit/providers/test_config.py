"""The providers file (`corral serve --config`): what it accepts, and a one-line error that
names the file, the table and the key for everything it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral_server.providers.config import ConfigError, ProviderEntry, load, parse

COMPLETE = """
[providers.demo]
kind = "scripted"

[providers.my-agent]
kind = "acp"
command = ["/opt/agent/bin/agent", "--acp"]
env = { AGENT_API_KEY = "k", HOME = "/tmp/agent-home" }

[providers.claude-code]
kind = "claude-code"
command = ["/opt/claude/bin/claude"]
inherit_env = false

[providers.codex]
kind = "codex"
config = { model = "o3", "model_providers.fake.base_url" = "http://127.0.0.1:9/v1", n = 1, on = true, list = ["a", 2] }
"""  # noqa: E501


def test_a_complete_file_gives_its_entries_in_file_order() -> None:
    demo, agent, claude, codex = parse(COMPLETE, "corral.toml")
    assert demo == ProviderEntry("demo", "scripted")
    assert agent == ProviderEntry(
        "my-agent",
        "acp",
        ("/opt/agent/bin/agent", "--acp"),
        env={"AGENT_API_KEY": "k", "HOME": "/tmp/agent-home"},
    )
    assert claude == ProviderEntry(
        "claude-code", "claude-code", ("/opt/claude/bin/claude",), inherit_env=False
    )
    assert codex.command == ("codex",)  # the kind's default program
    assert codex.codex_config == (
        ("model", '"o3"'),
        ("model_providers.fake.base_url", '"http://127.0.0.1:9/v1"'),
        ("n", "1"),
        ("on", "true"),
        ("list", '["a", 2]'),
    )


def test_an_empty_file_has_no_entries() -> None:
    assert parse("", "corral.toml") == ()
    assert parse("# nothing yet\n[providers]\n", "corral.toml") == ()


def test_the_claude_code_kind_runs_claude_unless_told_otherwise() -> None:
    (entry,) = parse('[providers.cc]\nkind = "claude-code"\n')
    assert entry.command == ("claude",) and entry.inherit_env and entry.env == {}


def test_load_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "corral.toml"
    path.write_text('[providers.x]\nkind = "acp"\ncommand = ["x"]\n')
    assert load(path) == (ProviderEntry("x", "acp", ("x",)),)


def test_a_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value) == (f"{path}: cannot read the providers file: No such file or directory")


def test_a_directory_is_not_a_providers_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"^{tmp_path}: cannot read the providers file: "):
        load(tmp_path)


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[providers.x]\nkind = "\xe9"\n')
    with pytest.raises(ConfigError, match=f"^{path}: cannot read the providers file: "):
        load(path)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "[providers.x\nkind = 1",
            "corral.toml: not valid TOML: Expected ']' at the end of a table declaration "
            "(at line 1, column 13)",
        ),
        (
            'providers = "acp"',
            "corral.toml: 'providers' must be a table of [providers.NAME] tables",
        ),
        (
            "[provider.x]\nkind = 'acp'",
            "corral.toml: unknown top-level key 'provider' (the file holds [providers.NAME] "
            "tables)",
        ),
        (
            "[providers]\nx = 1",
            "corral.toml: [providers.x]: must be a table",
        ),
        (
            "[providers.x]\ncommand = ['x']",
            "corral.toml: [providers.x]: 'kind' is required (one of scripted, acp, "
            "claude-code, codex)",
        ),
        (
            "[providers.x]\nkind = 'openai'",
            "corral.toml: [providers.x]: unknown kind 'openai' (one of scripted, acp, "
            "claude-code, codex)",
        ),
        (
            "[providers.x]\nkind = 3",
            "corral.toml: [providers.x]: unknown kind 3 (one of scripted, acp, claude-code, codex)",
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = ['x']\ncmd = ['y']",
            "corral.toml: [providers.x]: unknown key 'cmd' (kind acp takes: kind, command, "
            "env, inherit_env, model, mode)",
        ),
        (
            "[providers.x]\nkind = 'scripted'\ncommand = ['x']",
            "corral.toml: [providers.x]: unknown key 'command' (kind scripted takes: kind, steer, "
            "live_settings, model, mode)",
        ),
        (
            "[providers.x]\nkind = 'claude-code'\nconfig = { model = 'o3' }",
            "corral.toml: [providers.x]: unknown key 'config' (kind claude-code takes: kind, "
            "command, env, inherit_env, model, mode)",
        ),
        (
            "[providers.x]\nkind = 'acp'",
            "corral.toml: [providers.x]: 'command' is required for kind acp",
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = 'my-agent --acp'",
            "corral.toml: [providers.x]: 'command' must be a non-empty list of strings, e.g. "
            "['my-agent', '--acp']",
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = []",
            "corral.toml: [providers.x]: 'command' must be a non-empty list of strings, e.g. "
            "['my-agent', '--acp']",
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = ['']",
            "corral.toml: [providers.x]: 'command' must be a non-empty list of strings, e.g. "
            "['my-agent', '--acp']",
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = ['x', 1]",
            "corral.toml: [providers.x]: 'command' must be a non-empty list of strings, e.g. "
            "['my-agent', '--acp']",
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = ['x']\nenv = ['A=1']",
            "corral.toml: [providers.x]: 'env' must be a table of strings, e.g. "
            '{ KEY = "value" }',
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = ['x']\nenv = { PORT = 8080 }",
            "corral.toml: [providers.x]: env.PORT must be a string, not an integer",
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = ['x']\nenv = { 'A=B' = 'c' }",
            "corral.toml: [providers.x]: env.A=B: not a usable environment variable",
        ),
        (
            "[providers.x]\nkind = 'acp'\ncommand = ['x']\ninherit_env = 'no'",
            "corral.toml: [providers.x]: 'inherit_env' must be true or false, not a string",
        ),
        (
            "[providers.x]\nkind = 'codex'\nconfig = 'model=o3'",
            "corral.toml: [providers.x]: 'config' must be a table of codex settings",
        ),
        (
            "[providers.x]\nkind = 'codex'\nconfig = { tools = { web = true } }",
            "corral.toml: [providers.x]: config.tools: must be a string, number, boolean or "
            "array, not a table",
        ),
        (
            "[providers.x]\nkind = 'codex'\nconfig = { 'a b' = 1 }",
            "corral.toml: [providers.x]: config.a b: a codex setting is a dotted key",
        ),
        (
            "[providers.scripted]\nkind = 'acp'\ncommand = ['x']",
            "corral.toml: [providers.scripted]: the name 'scripted' is the built-in scripted "
            "provider's",
        ),
        (
            "[providers.'my agent']\nkind = 'scripted'",
            "corral.toml: [providers.my agent]: a provider name is 1-64 letters, digits, '.', "
            "'_' or '-', starting with a letter or digit",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_file_table_and_key(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text, "corral.toml")
    assert str(info.value) == error
    assert "\n" not in str(info.value)


def test_codex_settings_that_are_not_finite_are_spelled_as_toml() -> None:
    (entry,) = parse("[providers.x]\nkind = 'codex'\nconfig = { a = inf, b = -inf, c = nan }")
    assert entry.codex_config == (("a", "inf"), ("b", "-inf"), ("c", "nan"))


def test_non_ascii_codex_strings_stay_valid_toml() -> None:
    import tomllib

    (entry,) = parse("[providers.x]\nkind = 'codex'\nconfig = { greeting = 'grüß \"dich\"' }")
    ((key, value),) = entry.codex_config
    assert tomllib.loads(f"{key} = {value}") == {"greeting": 'grüß "dich"'}


def test_the_example_in_docs_providers_md_parses() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "providers.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    entries = parse(example, "docs/providers.md")
    assert [(e.name, e.kind) for e in entries] == [
        ("claude-code", "claude-code"),
        ("codex-corp", "codex"),
        ("gemini", "acp"),
        ("my-agent", "acp"),
        ("demo", "scripted"),
    ]
    assert dict(entries[1].codex_config)["model_providers.corp.wire_api"] == '"responses"'
    assert entries[3].inherit_env is False

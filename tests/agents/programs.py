"""How to run each pinned agent program offline against the fake model server: its argv, a
clean environment (temp HOME, telemetry and auto-update off, no proxy) and its config files.

Every environment carries LEFTOVER_TAG, so a test can find any process the agent left behind
by its environment, whatever process group or session that process moved to.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "agents" / "node_modules" / ".bin"
LEFTOVER_TAG = "CORRAL_AGENT_SMOKE"

CLAUDE_MODEL = "claude-sonnet-4-5"
CODEX_MODEL = "gpt-5.5"  # in the pinned binary's bundled model list: no fallback warning
GEMINI_MODEL = "gemini-2.5-flash"


@dataclass(frozen=True, slots=True)
class Program:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    tag: str  # the value of LEFTOVER_TAG in its environment


def installed(name: str) -> bool:
    return (BIN / name).exists()


def base_env(home: Path) -> tuple[dict[str, str], str]:
    tag = uuid.uuid4().hex
    tmp = home / "tmp"  # gemini-cli writes error reports to the temp dir: keep them in HOME
    tmp.mkdir(parents=True, exist_ok=True)
    node_dir = str(Path(os.path.realpath(_which_node())).parent)
    env = {
        "PATH": os.pathsep.join([node_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_PROXY": "127.0.0.1,localhost",
        "NO_COLOR": "1",
        "TMPDIR": str(tmp),
        LEFTOVER_TAG: tag,
    }
    return env, tag


def _which_node() -> str:
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if (Path(d) / "node").exists():
            return str(Path(d) / "node")
    return "/usr/bin/node"


def _claude_env(home: Path, base_url: str) -> dict[str, str]:
    env, _ = base_env(home)
    config = home / ".claude"
    config.mkdir(parents=True, exist_ok=True)
    return env | {
        "CLAUDE_CONFIG_DIR": str(config),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def claude_code(home: Path, cwd: Path, base_url: str, *extra: str) -> Program:
    env = _claude_env(home, base_url)
    argv = [
        str(BIN / "claude"),
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--model",
        CLAUDE_MODEL,
        *extra,
    ]
    return Program(argv, env, cwd, env[LEFTOVER_TAG])


def claude_acp(home: Path, cwd: Path, base_url: str) -> Program:
    env = _claude_env(home, base_url) | {"IS_SANDBOX": "1", "ANTHROPIC_MODEL": CLAUDE_MODEL}
    return Program([str(BIN / "claude-agent-acp")], env, cwd, env[LEFTOVER_TAG])


CODEX_CONFIG = """\
model = "{model}"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "FAKE_OPENAI_KEY"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false

[analytics]
enabled = false

[feedback]
enabled = false
"""


def codex(home: Path, cwd: Path, base_url: str) -> Program:
    env, tag = base_env(home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        CODEX_CONFIG.format(model=CODEX_MODEL, base_url=base_url)
    )
    env |= {"CODEX_HOME": str(codex_home), "FAKE_OPENAI_KEY": "sk-fake"}
    return Program([str(BIN / "codex"), "app-server"], env, cwd, tag)


def gemini(home: Path, cwd: Path, base_url: str) -> Program:
    env, tag = base_env(home)
    env |= {
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_API_KEY": "fake-gemini-key",
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    # general.maxAttempts 1: no retry with backoff on a 5xx (the default is 10 attempts).
    settings = home / ".gemini"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "settings.json").write_text(
        '{"privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},'
        ' "general": {"disableAutoUpdate": true, "disableUpdateNag": true, "maxAttempts": 1},'
        ' "security": {"auth": {"selectedType": "gemini-api-key"}}}'
    )
    argv = [str(BIN / "gemini"), "--acp", "--model", GEMINI_MODEL]
    return Program(argv, env, cwd, tag)

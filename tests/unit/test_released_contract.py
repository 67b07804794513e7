"""The contract cannot break by accident: `buf breaking` against the released image
(proto/released/, as buildscripts/test runs it) passes for proto/ as it is and for additions,
and fails, naming what broke, on a copy of proto/ with a field removed or renumbered, or an RPC
renamed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RELEASED = ROOT / "proto" / "released" / "corral.v1.binpb"
AGENT = "corral/v1/agent.proto"
AGENT_SERVICE = "corral/v1/agent_service.proto"


def buf() -> Path:
    path = Path(sys.executable).parent / "buf"
    if not path.is_file():
        pytest.fail(f"buf is missing at {path}: install the dev extras (buf-bin)")
    return path


def breaking(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(buf()), "breaking", "--against", str(RELEASED)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=60,
    )


def copy_of_proto(tmp_path: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """buf.yaml and proto/corral/ copied, with each file's (old, new) text replaced once."""
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    shutil.copytree(ROOT / "proto" / "corral", tmp_path / "proto" / "corral")
    for name, (old, new) in edits.items():
        path = tmp_path / "proto" / name
        text = path.read_text()
        assert text.count(old) == 1, f"{old!r} is not once in {name}"
        path.write_text(text.replace(old, new))
    return tmp_path


def test_the_protos_as_they_are_keep_the_released_contract() -> None:
    done = breaking(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_additions_keep_it(tmp_path: Path) -> None:
    tree = copy_of_proto(
        tmp_path,
        {
            AGENT: ("  string title = 6;\n", "  string title = 6;\n  string added_note = 99;\n"),
            AGENT_SERVICE: (
                "  rpc ListProviders(ListProvidersRequest) returns (ListProvidersResponse);\n",
                "  rpc ListProviders(ListProvidersRequest) returns (ListProvidersResponse);\n"
                "  rpc CountAgents(ListAgentsRequest) returns (ListAgentsResponse);\n",
            ),
        },
    )
    done = breaking(tree)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("edits", "complaint"),
    [
        (
            {AGENT: ("  string title = 6;\n", "")},
            'Previously present field "6" with name "title" on message "Agent" was deleted',
        ),
        (
            {AGENT: ("  string title = 6;\n", "  string title = 99;\n")},
            'Previously present field "6" with name "title" on message "Agent" was deleted',
        ),
        (
            {AGENT_SERVICE: ("rpc GetAgent(GetAgentRequest)", "rpc FetchAgent(GetAgentRequest)")},
            'Previously present RPC "GetAgent" on service "AgentService" was deleted',
        ),
    ],
    ids=["field-removed", "field-renumbered", "rpc-renamed"],
)
def test_a_breaking_change_fails_naming_what_broke(
    tmp_path: Path, edits: dict[str, tuple[str, str]], complaint: str
) -> None:
    done = breaking(copy_of_proto(tmp_path, edits))
    assert done.returncode != 0
    assert complaint in done.stdout, done.stdout + done.stderr

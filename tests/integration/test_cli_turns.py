"""The CLI's commands for turns and rewind against a real daemon, in-process: `rewind` (to a message
the provider confirmed; `logs` shows its id), `send --steer / --replace`, and pending
permissions in `ls` and to followers (`attach`, `logs -f`)."""

from __future__ import annotations

import json
import re
import threading
import uuid
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def new_agent(addr: str, cwd: Path, capsys: Capture, prompt: str) -> str:
    assert cli(addr, "run", "--cwd", str(cwd), prompt) == 0
    match = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert match is not None
    return match.group(1)


def test_rewind_goes_back_to_before_a_message_logs_shows_and_refuses_an_unconfirmed_one(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys, "/echo\n/reply one")
    assert cli(grpc_addr, "send", "-f", agent_id, "/echo\n/reply two") == 0
    assert cli(grpc_addr, "logs", agent_id) == 0
    logged = capsys.readouterr().out
    confirmed = re.findall(r"^#(\d+) .*user_message .*\(message (\S+)\)$", logged, re.MULTILINE)
    assert [seq for seq, _ in confirmed] == ["1", "3"]
    second = confirmed[1][1]

    assert cli(grpc_addr, "rewind", agent_id[:10], "never-confirmed") == 2
    err = capsys.readouterr().err
    assert "MESSAGE_NOT_CONFIRMED" in err and "never-confirmed" in err

    assert cli(grpc_addr, "rewind", agent_id, second) == 0
    said = capsys.readouterr().out
    assert re.fullmatch(
        rf"{agent_id} rewound to before message {re.escape(second)}: 2 rows kept, epoch \S+\n",
        said,
    )
    assert cli(grpc_addr, "logs", agent_id) == 0
    assert [line.split("  ")[-1] for line in capsys.readouterr().out.splitlines()] == [
        f"(message {confirmed[0][1]})",
        "one",
    ]

    assert cli(grpc_addr, "--json", "rewind", agent_id, confirmed[0][1]) == 0
    agent = json.loads(capsys.readouterr().out)
    assert agent["id"] == agent_id and agent["timeline"]["epoch"] not in said
    assert agent["timeline"]["next_seq"] == "1"  # nothing kept before the first message


def test_send_steer_falls_back_to_the_queue_and_replace_takes_over_the_running_turn(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    agent_id = new_agent(addr, tmp_path, capsys, "hi")
    assert cli(addr, "send", agent_id, "/sleep 9203") == 0
    first = capsys.readouterr().out.split()[-1]
    grpc_server.clock.wait_for_timer(9203)
    assert cli(addr, "send", agent_id, "--steer", "/reply steered") == 0  # scripted can't steer
    assert re.fullmatch(r"queued as queued-[0-9a-f]{32}\n", capsys.readouterr().out)
    assert cli(addr, "--json", "send", agent_id, "--replace", "/reply instead") == 0
    replaced = json.loads(capsys.readouterr().out)
    assert replaced["disposition"] == "PROMPT_DISPOSITION_REPLACED"
    assert replaced["turn_id"] not in ("", first)
    assert cli(addr, "wait", agent_id) == 0
    capsys.readouterr()
    assert cli(addr, "logs", agent_id) == 0
    said = [line.split("  ")[-1] for line in capsys.readouterr().out.splitlines()]
    assert said[-5:] == [
        "TURN_CANCELED: turn canceled: interrupted",
        "/reply instead",
        "instead",
        "/reply steered",
        "steered",
    ]


def test_a_pending_permission_shows_in_ls_and_to_followers_with_how_to_answer_it(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    team = f"t{uuid.uuid4().hex[:8]}"
    assert cli(addr, "run", "--cwd", str(tmp_path), "--label", f"team={team}", "hi") == 0
    found = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert found is not None
    agent_id = found.group(1)
    assert grpc_server.daemon is not None
    hub = grpc_server.daemon.hub

    def subscribed(count: int) -> None:
        while sum(agent_id in sub.scope for sub in hub.subscriptions) < count:
            threading.Event().wait(0.01)

    codes: list[int] = []
    attach = threading.Thread(target=lambda: codes.append(cli(addr, "attach", agent_id)))
    attach.start()
    subscribed(1)
    assert cli(addr, "send", agent_id, "/permission write\n/reply ok") == 0
    assert cli(addr, "wait", agent_id) == 0  # returns on the pending permission
    # (attach prints the rows on the same stdout)
    output = [capsys.readouterr()]
    request = re.search(r"^permission write \(id (\S+)\)$", output[0].out, re.MULTILINE)
    assert request is not None
    assert cli(addr, "ls", "-l", f"team={team}") == 0
    output.append(capsys.readouterr())
    row = output[-1].out.splitlines()[-1]
    assert row.split("  ")[:2] == [agent_id, "running, 1 perm"], row
    assert cli(addr, "show", agent_id) == 0
    output.append(capsys.readouterr())
    assert f"permissions 1\n              {request.group(1)}  write Allow write? (turn " in (
        output[-1].out
    )
    # A follower that starts now learns of it from its snapshot.
    late = threading.Thread(
        target=lambda: codes.append(cli(addr, "logs", "-f", "--until-idle", agent_id))
    )
    late.start()
    subscribed(2)
    assert cli(addr, "permit", agent_id, request.group(1)) == 0
    late.join(30)
    assert cli(addr, "wait", agent_id) == 0
    assert cli(addr, "close", agent_id) == 0
    attach.join(30)
    output.append(capsys.readouterr())
    assert codes == [0, 0]
    notes = "".join(o.err for o in output)
    asked = (
        f"⏸ permission requested: write Allow write? (id {request.group(1)}); "
        f"answer with: corral permit {agent_id} [--deny] {request.group(1)}"
    )
    assert notes.count(asked) == 2  # once to each follower
    assert notes.count(f"permission {request.group(1)} allowed") == 2

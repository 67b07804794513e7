"""What a new user tripped over in the `corral` CLI (a first user's report), in-process against a
real daemon: no ghost agent from `run`, global options after the command, agent id prefixes,
whole turn ids, `logs -f` ending with the agent, and each error said once.

Ctrl-C (a real SIGINT) is in test_cli_process.py.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from corral_cli.main import main
from corral_server.app import Config
from tests.support.daemon import DaemonThread, running_daemon

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def new_agent(addr: str, cwd: Path, capsys: Capture, *options: str, prompt: str = "hi") -> str:
    assert cli(addr, "run", "--cwd", str(cwd), *options, prompt) == 0
    match = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert match is not None
    return match.group(1)


def listed(addr: str, selector: str, capsys: Capture) -> list[dict[str, object]]:
    assert cli(addr, "--json", "ls", "--all", "--selector", selector) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


# --- run creates nothing for a rejected prompt ----------------------------------------------


def test_run_with_an_unknown_directive_creates_no_agent_and_exits_two(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    label = f"ghost={uuid.uuid4().hex}"
    assert cli(grpc_addr, "run", "--cwd", str(tmp_path), "--label", label, "/bogus") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "unknown directive '/bogus'" in err
    assert "agent " not in err  # no agent was announced...
    assert listed(grpc_addr, label, capsys) == []  # ...and none exists


def test_run_with_a_too_long_prompt_creates_no_agent_and_exits_two(
    grpc_addr: str, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    label = f"ghost={uuid.uuid4().hex}"
    monkeypatch.setattr(sys, "stdin", io.StringIO("x" * 1_000_001))  # the default limit + 1
    assert cli(grpc_addr, "run", "--cwd", str(tmp_path), "--label", label, "-") == 2
    assert "INVALID_ARGUMENT" in capsys.readouterr().err
    assert listed(grpc_addr, label, capsys) == []


def test_run_still_streams_a_turn_that_sleeps_and_prints_its_rows_in_order(
    grpc_server: DaemonThread, grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    # The turn is still running when run subscribes: its later rows arrive live.
    codes: list[int] = []
    prompt = "/think before\n/sleep 4321\n/think after\n/reply done"
    runner = threading.Thread(
        target=lambda: codes.append(cli(grpc_addr, "run", "--cwd", str(tmp_path), prompt))
    )
    runner.start()
    grpc_server.clock.wait_for_timer(4321)
    grpc_server.advance(4321)
    runner.join(30)
    assert codes == [0]
    out, err = capsys.readouterr()
    assert out == "done\n"
    assert err.index("· thinking: before") < err.index("· thinking: after")


# --- global options after the command -------------------------------------------------------


def test_json_and_addr_are_accepted_after_the_command(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    team = uuid.uuid4().hex
    agent_id = new_agent(grpc_addr, tmp_path, capsys, "--label", f"team={team}")
    assert main(["ls", "--selector", f"team={team}", "--json", "--addr", grpc_addr]) == 0
    (agent,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert agent["id"] == agent_id
    assert main(["logs", agent_id, "--addr", grpc_addr, "--json", "--timeout", "30"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["seq"] for row in rows] == ["1", "2"]


def test_an_option_after_the_command_wins_over_the_same_option_before_it(
    grpc_addr: str, capsys: Capture
) -> None:
    assert main(["--addr", "127.0.0.1:1", "ls", "--selector", "nobody", "--addr", grpc_addr]) == 0
    assert capsys.readouterr().err == "no agents\n"


# --- agent id prefixes ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["logs", "wait", "cancel", "send", "close"])
def test_every_command_accepts_a_unique_prefix_of_an_agent_id(
    grpc_addr: str, tmp_path: Path, capsys: Capture, command: str
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    argv = [command, agent_id[:12]] + (["/reply again"] if command == "send" else [])
    assert cli(grpc_addr, *argv) == 0
    out, err = capsys.readouterr()
    assert "error" not in err
    if command == "close":
        assert out.startswith(f"{agent_id} closed at ")


def test_ls_parent_accepts_a_prefix(grpc_addr: str, tmp_path: Path, capsys: Capture) -> None:
    parent = new_agent(grpc_addr, tmp_path, capsys)
    child = new_agent(grpc_addr, tmp_path, capsys, "--label", f"corral.parent-agent-id={parent}")
    assert cli(grpc_addr, "--json", "ls", "--parent", parent[:10]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [child]


def test_an_ambiguous_prefix_names_the_candidates_changes_nothing_and_exits_two(
    capsys: Capture, tmp_path: Path
) -> None:
    with running_daemon(Config()) as daemon:
        addr = daemon.address
        # 17 ids over 16 hex digits: at least two share their first character.
        for _ in range(17):
            new_agent(addr, tmp_path, capsys)
        assert cli(addr, "--json", "ls") == 0
        by_first: defaultdict[str, list[str]] = defaultdict(list)
        for line in capsys.readouterr().out.splitlines():
            agent_id = json.loads(line)["id"]
            by_first[agent_id[0]].append(agent_id)
        prefix, ids = next((p, ids) for p, ids in by_first.items() if len(ids) > 1)
        assert cli(addr, "close", prefix) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err.startswith(
            f"error: INVALID_ARGUMENT: {prefix!r} is ambiguous: {len(ids)} agent ids start with"
        )
        assert all(agent_id in err for agent_id in ids[:5])
        assert cli(addr, "--json", "ls") == 0
        assert '"closed"' not in capsys.readouterr().out


@pytest.mark.parametrize("command", ["logs", "wait", "cancel", "send", "close"])
def test_an_unknown_prefix_is_a_clear_error_with_exit_two(
    grpc_addr: str, capsys: Capture, command: str
) -> None:
    argv = [command, "no-such-agent"] + (["hi"] if command == "send" else [])
    assert cli(grpc_addr, *argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "error: NOT_FOUND: no agent id starts with 'no-such-agent' (`corral ls --all` lists them)\n"
    )


def test_an_unknown_whole_id_is_the_daemons_not_found(grpc_addr: str, capsys: Capture) -> None:
    whole = uuid.uuid4().hex
    assert cli(grpc_addr, "logs", whole) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: NOT_FOUND: agent '{whole}' not found\n")
    assert "  reason: AGENT_NOT_FOUND\n" in err


def test_an_empty_agent_id_is_refused_without_touching_any_agent(
    grpc_addr: str, capsys: Capture
) -> None:
    assert cli(grpc_addr, "close", "") == 2
    assert capsys.readouterr().err == "error: INVALID_ARGUMENT: the agent id is empty\n"


# --- turn ids are whole ---------------------------------------------------------------------


def test_turn_ids_are_printed_whole(
    grpc_server: DaemonThread, grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    team = uuid.uuid4().hex
    agent_id = new_agent(grpc_addr, tmp_path, capsys, "--label", f"team={team}")
    assert cli(grpc_addr, "send", agent_id, "/sleep 1000") == 0
    turn = capsys.readouterr().out.split()[-1]
    assert re.fullmatch(r"turn-[0-9a-f]{32}", turn)
    assert cli(grpc_addr, "ls", "-l", f"team={team}") == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(f"{agent_id}  running ")
    assert cli(grpc_addr, "show", agent_id) == 0
    assert f"\nstate       running {turn}\n" in capsys.readouterr().out
    grpc_server.advance(1000)
    assert cli(grpc_addr, "send", agent_id, "--follow", "again") == 0
    assert re.search(r"^turn turn-[0-9a-f]{32} started$", capsys.readouterr().err, re.MULTILINE)


# --- logs -f ends with the agent ------------------------------------------------------------


def test_logs_follow_ends_with_a_message_when_the_agent_is_closed(
    grpc_addr: str, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    captured = sys.stdout
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as reader, os.fdopen(write_fd, "w") as writer:
        monkeypatch.setattr(sys, "stdout", writer)
        codes: list[int] = []
        follower = threading.Thread(
            target=lambda: codes.append(cli(grpc_addr, "logs", agent_id, "-f"))
        )
        follower.start()
        assert reader.readline().startswith("#1  ")  # history is printed once it is live
        monkeypatch.setattr(sys, "stdout", captured)
        assert cli(grpc_addr, "close", agent_id) == 0
        follower.join(30)
        assert not follower.is_alive()
    assert codes == [0]
    assert f"-- agent {agent_id} is closed --\n" in capsys.readouterr().err


def test_logs_follow_of_a_closed_agent_prints_its_rows_and_ends(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "close", agent_id) == 0
    capsys.readouterr()
    assert cli(grpc_addr, "logs", "-f", agent_id) == 0
    out, err = capsys.readouterr()
    assert [line.split("  ")[0] for line in out.splitlines()] == ["#1", "#2"]
    assert err == f"-- agent {agent_id} is closed --\n"


# --- each error once, and a hint that fits --------------------------------------------------


def test_an_invalid_prompt_error_is_printed_once(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "send", agent_id, "/bogus") == 2
    err = capsys.readouterr().err
    assert err.count("unknown directive") == 1, err
    assert err.startswith("error: INVALID_ARGUMENT: ")
    assert len(err.splitlines()) == 1  # no reason that repeats the code either


def test_an_unknown_provider_lists_the_providers_once(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    assert cli(grpc_addr, "run", "--cwd", str(tmp_path), "--provider", "nope", "hi") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: INVALID_ARGUMENT: unknown provider 'nope'; known: scripted",
        "  reason: UNKNOWN_PROVIDER",
    ]


def test_a_draining_daemon_gets_a_hint_that_does_not_contradict_it(
    tmp_path: Path, capsys: Capture
) -> None:
    with running_daemon(Config()) as daemon:
        agent_id = new_agent(daemon.address, tmp_path, capsys)
        assert daemon.daemon is not None
        daemon.run(daemon.daemon.manager.shutdown())  # refuses new work, still answers
        assert cli(daemon.address, "send", agent_id, "hello?") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: UNAVAILABLE: the daemon is shutting down")
    assert "  reason: SHUTTING_DOWN\n" in err
    assert err.splitlines()[-1] == (
        f"hint: the daemon at {daemon.address} is draining; "
        "retry once it is back, or use another one"
    )
    assert "start one" not in err and "may not be running" not in err


# --- what the README says about /refuse-interrupt -------------------------------------------


def test_a_refused_interrupt_of_a_turn_that_ends_by_itself_within_the_settle_wait_is_settled(
    grpc_server: DaemonThread, grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "send", agent_id, "/refuse-interrupt\n/sleep 3000\n/reply end") == 0
    capsys.readouterr()
    codes: list[int] = []
    canceler = threading.Thread(target=lambda: codes.append(cli(grpc_addr, "cancel", agent_id)))
    canceler.start()
    grpc_server.clock.wait_for_timer(10_000)  # refused; the settle wait (settle_s) has begun
    assert canceler.is_alive()  # CancelTurn blocks while the turn runs on
    grpc_server.advance(3000)  # the turn ends by itself, well within the settle wait
    canceler.join(30)
    assert codes == [0]
    assert capsys.readouterr().out == "settled (agent idle)\n"
    assert cli(grpc_addr, "logs", agent_id, "--limit", "1") == 0
    assert capsys.readouterr().out.rstrip().endswith("assistant_message  end")


def run_agent(addr: str, cwd: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`corral run` a first turn; the agent id it reports on stderr."""
    assert main(["--addr", addr, "run", "--cwd", str(cwd), "hi"]) == 0
    found = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert found is not None
    return found.group(1)


def test_reload_restarts_the_session_and_rehydrate_moves_the_epoch(
    grpc_addr: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--addr", grpc_addr, "run", "--cwd", str(tmp_path), "hi"]) == 0
    agent_id = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert agent_id is not None
    assert main(["--addr", grpc_addr, "--json", "reload", agent_id.group(1)[:12]]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert main(["--addr", grpc_addr, "--json", "reload", agent_id.group(1), "--rehydrate"]) == 0
    moved = json.loads(capsys.readouterr().out)
    assert kept["timeline"]["next_seq"] != "1"
    assert moved["timeline"]["epoch"] != kept["timeline"]["epoch"]
    assert moved["provider_session_id"] != kept["provider_session_id"]
    assert main(["--addr", grpc_addr, "reload", agent_id.group(1)]) == 0
    assert re.match(
        rf"{agent_id.group(1)} reloaded: idle, session \S+, epoch \S+\n", capsys.readouterr().out
    )
    # The rehydrated epoch holds nothing the scripted provider could replay: logs says so.
    assert main(["--addr", grpc_addr, "logs", agent_id.group(1)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert re.fullmatch(r"the timeline is empty \(epoch [0-9a-f]+: no row yet\)\n", err)


def test_send_queue_prints_the_queued_message_id(
    grpc_server: DaemonThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = grpc_server.address
    agent_id = run_agent(addr, tmp_path, capsys)
    assert main(["--addr", addr, "send", agent_id, "/sleep 9001"]) == 0
    capsys.readouterr()
    grpc_server.clock.wait_for_timer(9001)
    assert main(["--addr", addr, "send", agent_id, "--queue", "later"]) == 0
    assert re.fullmatch(r"queued as queued-[0-9a-f]{32}\n", capsys.readouterr().out)
    assert main(["--addr", addr, "send", agent_id, "now"]) == 2  # REJECT: busy
    assert "AGENT_BUSY" in capsys.readouterr().err
    grpc_server.advance(9001)


def test_permit_allows_the_only_pending_request_and_the_turn_goes_on(
    grpc_server: DaemonThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = grpc_server.address
    agent_id = run_agent(addr, tmp_path, capsys)
    assert main(["--addr", addr, "permit", agent_id]) == 2  # nothing pending yet
    assert capsys.readouterr().err == (
        f"error: FAILED_PRECONDITION: agent {agent_id} has no pending permission\n"
    )
    assert main(["--addr", addr, "send", agent_id, "/permission write\n/reply ok"]) == 0
    capsys.readouterr()
    assert main(["--addr", addr, "wait", agent_id]) == 0  # returns on the pending permission
    assert capsys.readouterr().out.startswith("permission write (id ")
    assert main(["--addr", addr, "--json", "permit", agent_id]) == 0
    agent = json.loads(capsys.readouterr().out)
    assert "pending_permissions" not in agent
    assert main(["--addr", addr, "wait", agent_id]) == 0
    capsys.readouterr()
    assert main(["--addr", addr, "logs", agent_id]) == 0
    assert "ok" in capsys.readouterr().out


def test_archive_prints_each_archived_agent_and_ls_hides_them(
    grpc_server: DaemonThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = grpc_server.address
    team = f"t{uuid.uuid4().hex[:8]}"
    assert (
        main(["--addr", addr, "run", "--cwd", str(tmp_path), "--label", f"team={team}", "hi"]) == 0
    )
    found = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert found is not None
    agent_id = found.group(1)
    assert main(["--addr", addr, "archive", agent_id[:10]]) == 0
    assert capsys.readouterr().out == f"archived {agent_id}\n"
    assert main(["--addr", addr, "--json", "ls", "-l", f"team={team}"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["--addr", addr, "--json", "ls", "-l", f"team={team}", "--all"]) == 0
    assert agent_id in capsys.readouterr().out

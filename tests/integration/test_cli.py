"""The `corral` CLI in-process against a real daemon: what each command prints and its exit code.

Subprocess tests (the console script, Ctrl-C, `corral serve`) are in test_cli_process.py.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import sys
import threading
import uuid
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def new_agent(addr: str, cwd: Path, capsys: Capture, *options: str) -> str:
    """`corral run` a first turn; the agent id it reports on stderr."""
    assert cli(addr, "run", "--cwd", str(cwd), *options, "hi") == 0
    match = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert match is not None
    return match.group(1)


def wait_until_idle(addr: str, agent_id: str, capsys: Capture) -> None:
    assert cli(addr, "logs", agent_id, "-f", "--until-idle", "--limit", "1") == 0
    capsys.readouterr()


def seqs(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.match(r"#(\d+)  ", line))]


def test_run_prints_the_reply_on_stdout_and_the_agent_on_stderr(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    assert cli(grpc_addr, "run", "--cwd", str(tmp_path), "hello", "world") == 0
    out, err = capsys.readouterr()
    assert out == "You said: hello world\n"
    assert re.match(r"agent [0-9a-z-]+\n", err)


def test_run_of_a_failing_turn_exits_one_and_prints_the_error(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    assert cli(grpc_addr, "run", "--cwd", str(tmp_path), "/fail disk full") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "disk full" in err
    assert re.search(r"^turn turn-\S+ failed$", err, re.MULTILINE)  # the error row said why


def test_run_reads_a_multi_line_prompt_from_stdin_and_shows_thinking_and_tools(
    grpc_addr: str, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("/think hmm\n/tool grep\n/reply done\n"))
    assert cli(grpc_addr, "run", "--cwd", str(tmp_path), "-") == 0
    out, err = capsys.readouterr()
    assert out == "done\n"
    assert "· thinking: hmm\n" in err
    assert "⚙ tool grep completed\n" in err


def test_run_with_json_prints_parseable_lines_ending_with_turn_completed(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    assert cli(grpc_addr, "--json", "run", "--cwd", str(tmp_path), "--title", "J", "hey") == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["agent"]["title"] == "J"
    assert "turn_started" in lines[1]
    assert "turn_completed" in lines[-1]
    replies = [
        r["row"]["item"]["assistant_message"]["text"]
        for r in lines
        if "row" in r and "assistant_message" in r["row"]["item"]
    ]
    assert replies == ["You said: hey"]


def test_run_with_an_empty_prompt_creates_nothing_and_exits_two(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    label = f"empty={uuid.uuid4().hex}"
    assert cli(grpc_addr, "run", "--cwd", str(tmp_path), "--label", label, " ") == 2
    assert "prompt is empty" in capsys.readouterr().err
    assert cli(grpc_addr, "--json", "ls", "--selector", label) == 0
    assert capsys.readouterr().out == ""


def test_send_prints_the_disposition_and_logs_show_every_row(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "send", agent_id, "/think hmm\n/reply done") == 0
    assert re.fullmatch(r"started turn-[0-9a-f]{32}\n", capsys.readouterr().out)
    wait_until_idle(grpc_addr, agent_id, capsys)
    assert cli(grpc_addr, "logs", agent_id) == 0
    lines = capsys.readouterr().out.splitlines()
    assert seqs(lines) == [1, 2, 3, 4, 5]
    assert [line.split("  ")[2:] for line in lines] == [
        ["user_message", "hi"],
        ["assistant_message", "You said: hi"],
        ["user_message", "/think hmm ↵ /reply done"],
        ["reasoning", "hmm"],
        ["assistant_message", "done"],
    ]
    assert cli(grpc_addr, "logs", agent_id, "--limit", "2") == 0
    assert seqs(capsys.readouterr().out.splitlines()) == [4, 5]


def test_send_follow_streams_the_reply_like_run(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "send", agent_id, "--follow", "/reply streamed") == 0
    assert capsys.readouterr().out == "streamed\n"


def test_send_to_a_busy_agent_is_rejected_with_the_reason_and_exit_two(
    grpc_server: DaemonThread, grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "send", agent_id, "/sleep 1000\n/reply slow") == 0
    capsys.readouterr()
    assert cli(grpc_addr, "send", agent_id, "again") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: FAILED_PRECONDITION: ")
    assert "  reason: AGENT_BUSY\n" in err
    # The CLI's own flags, not the API's field.
    assert "if_running" not in err
    assert "hint: send again with --queue" in err and "--steer" in err and "--replace" in err
    grpc_server.advance(1000)


def test_logs_follow_until_idle_prints_a_sleeping_turn_live_without_gaps_or_duplicates(
    grpc_server: DaemonThread,
    grpc_addr: str,
    tmp_path: Path,
    capsys: Capture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)  # rows 1, 2
    assert cli(grpc_addr, "send", agent_id, "/sleep 500\n/think later\n/reply later") == 0
    capsys.readouterr()
    # The follower writes into a pipe, so the test can wait for its first line.
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as reader, os.fdopen(write_fd, "w") as writer:
        monkeypatch.setattr(sys, "stdout", writer)
        codes: list[int] = []
        follower = threading.Thread(
            target=lambda: codes.append(cli(grpc_addr, "logs", agent_id, "-f", "--until-idle"))
        )
        follower.start()
        # History is printed only after the subscription is live: from here on the follower
        # must pick up every new row from the stream.
        first = reader.readline()
        while follower.is_alive():
            grpc_server.advance(500)  # a no-op until the provider sleeps; then it wakes it
            follower.join(0.05)
        writer.close()
        lines = [first, *reader.read().splitlines()]
    assert codes == [0]
    assert seqs(lines) == [1, 2, 3, 4, 5]
    assert lines[-2].split("  ")[2:] == ["reasoning", "later"]
    assert lines[-1].split("  ")[2:] == ["assistant_message", "later"]


def test_logs_follow_until_idle_on_an_idle_agent_prints_the_tail_and_exits(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "logs", agent_id, "-f", "--until-idle", "--limit", "1") == 0
    assert seqs(capsys.readouterr().out.splitlines()) == [2]


def test_logs_json_prints_one_row_per_line(grpc_addr: str, tmp_path: Path, capsys: Capture) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "--json", "logs", agent_id) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["seq"] for row in rows] == ["1", "2"]  # uint64 is a string in proto JSON
    assert rows[1]["item"]["assistant_message"]["text"] == "You said: hi"


def test_ls_filters_by_selector_and_json_gives_one_agent_per_line(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    team = uuid.uuid4().hex
    mine = new_agent(grpc_addr, tmp_path, capsys, "--label", f"team={team}", "--title", "Mine")
    new_agent(grpc_addr, tmp_path, capsys, "--label", "team=other")
    assert cli(grpc_addr, "ls", "--selector", f"team={team}") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["ID", "STATE", "QUEUED", "UPDATED", "PROVIDER", "TITLE"]
    assert len(table) == 2
    cells = table[1].split()
    assert cells[:3] == [mine, "idle", "0"] and cells[4:] == ["scripted", "Mine"]
    assert cli(grpc_addr, "--json", "ls", "--selector", f"team={team}") == 0
    agents = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(a["id"], a["labels"], "idle" in a["lifecycle"]) for a in agents] == [
        (mine, {"team": team}, True)
    ]


def test_ls_shows_a_running_agent_and_show_names_its_turn(
    grpc_server: DaemonThread, grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    team = uuid.uuid4().hex
    agent_id = new_agent(grpc_addr, tmp_path, capsys, "--label", f"team={team}")
    assert cli(grpc_addr, "send", agent_id, "/sleep 1000") == 0
    turn = capsys.readouterr().out.split()[-1]
    assert cli(grpc_addr, "ls", "-l", f"team={team}") == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.split()[:2] == [agent_id, "running"]
    assert cli(grpc_addr, "show", agent_id[:8]) == 0
    assert f"state       running {turn}\n" in capsys.readouterr().out
    grpc_server.advance(1000)


def test_a_bad_selector_prints_the_field_violation_and_exits_two(
    grpc_addr: str, capsys: Capture
) -> None:
    assert cli(grpc_addr, "ls", "--selector", "=bad") == 2
    err = capsys.readouterr().err
    # The message names the field; its violation would only repeat it.
    assert err.startswith("error: INVALID_ARGUMENT: label_selector: bad term '=bad'")
    assert len(err.splitlines()) == 1


def test_cancel_without_a_running_turn_is_not_running_and_exits_zero(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "cancel", agent_id) == 0
    assert capsys.readouterr().out == "not_running (agent idle)\n"


def test_cancel_of_a_sleeping_turn_settles_and_exits_zero(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "send", agent_id, "/sleep 600000") == 0
    assert cli(grpc_addr, "cancel", agent_id) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "settled (agent idle)"


def test_cancel_refused_by_the_provider_exits_three_and_the_turn_goes_on(
    grpc_server: DaemonThread, grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    prompt = "/refuse-interrupt\n/sleep 600000\n/reply end"
    assert cli(grpc_addr, "send", agent_id, prompt) == 0
    capsys.readouterr()
    codes: list[int] = []
    canceler = threading.Thread(target=lambda: codes.append(cli(grpc_addr, "cancel", agent_id)))
    canceler.start()
    # The daemon waits for the turn to settle on its own clock: move it until the answer.
    while canceler.is_alive():
        grpc_server.advance(1000)
        canceler.join(0.05)
    assert codes == [3]
    assert re.fullmatch(r"refused \(agent running turn-[0-9a-f]{32}\)\n", capsys.readouterr().out)
    grpc_server.advance(600_000)
    wait_until_idle(grpc_addr, agent_id, capsys)
    assert cli(grpc_addr, "logs", agent_id, "--limit", "1") == 0
    assert capsys.readouterr().out.rstrip().endswith("assistant_message  end")


def test_close_prints_the_closed_state_and_ls_shows_it(
    grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    team = uuid.uuid4().hex
    agent_id = new_agent(grpc_addr, tmp_path, capsys, "--label", f"team={team}")
    assert cli(grpc_addr, "close", agent_id) == 0
    assert re.fullmatch(rf"{agent_id} closed at \d{{4}}-\d\d-\d\d \S+\n", capsys.readouterr().out)
    assert cli(grpc_addr, "--json", "ls", "-l", f"team={team}") == 0
    (agent,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "closed_at" in agent["lifecycle"]["closed"]
    assert cli(grpc_addr, "send", agent_id, "hello?") == 2
    assert "reason: AGENT_CLOSED" in capsys.readouterr().err


def test_logs_follow_of_an_unknown_whole_agent_id_exits_two(
    grpc_addr: str, capsys: Capture
) -> None:
    assert cli(grpc_addr, "logs", "-f", uuid.uuid4().hex) == 2
    assert "reason: AGENT_NOT_FOUND" in capsys.readouterr().err


def test_an_unreachable_address_prints_the_hint_and_exits_one(capsys: Capture) -> None:
    with socket.socket() as probe:  # a port nobody listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{probe.getsockname()[1]}"
    assert cli(addr, "--timeout", "10", "ls") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: UNAVAILABLE: ")
    assert f"may not be running at {addr}" in err
    assert "corral serve" in err


def test_usage_errors_exit_two_without_calling_the_daemon(capsys: Capture) -> None:
    assert main(["--addr", "127.0.0.1:1", "ls", "--bogus"]) == 2
    assert main(["--addr", "127.0.0.1:1", "run", "--label", "nokey", "hi"]) == 2
    assert main(["--addr", "127.0.0.1:1", "logs", "x", "--until-idle"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err
    assert "label 'nokey' is not key=value" in err
    assert "--until-idle needs -f" in err
    assert "UNAVAILABLE" not in err


def test_wait_exits_zero_once_idle_and_four_on_timeout(
    grpc_server: DaemonThread, grpc_addr: str, tmp_path: Path, capsys: Capture
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)
    assert cli(grpc_addr, "wait", agent_id) == 0
    assert capsys.readouterr().out.startswith("idle")
    assert cli(grpc_addr, "send", agent_id, "/sleep 600000") == 0
    capsys.readouterr()
    outcome: list[int] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(cli(grpc_addr, "wait", agent_id, "--for", "3"))
    )
    waiter.start()
    grpc_server.clock.wait_for_timer(3000)
    grpc_server.advance(3000)
    waiter.join(30)
    assert outcome == [4]
    assert capsys.readouterr().out.startswith("timeout (agent running")
    assert cli(grpc_addr, "cancel", agent_id) == 0


def test_attach_prints_only_what_comes_after_it_and_ends_when_the_agent_closes(
    grpc_server: DaemonThread,
    grpc_addr: str,
    tmp_path: Path,
    capsys: Capture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent_id = new_agent(grpc_addr, tmp_path, capsys)  # rows 1, 2: history attach skips
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as reader, os.fdopen(write_fd, "w") as writer:
        monkeypatch.setattr(sys, "stdout", writer)
        codes: list[int] = []
        follower = threading.Thread(target=lambda: codes.append(cli(grpc_addr, "attach", agent_id)))
        assert grpc_server.daemon is not None
        hub = grpc_server.daemon.hub
        follower.start()
        # Until its subscription (scoped to this agent) is registered with the hub.
        while not any(agent_id in sub.scope for sub in hub.subscriptions):
            follower.join(0.01)
        monkeypatch.setattr(sys, "stdout", sys.__stdout__)
        assert cli(grpc_addr, "send", agent_id, "/reply live") == 0
        assert cli(grpc_addr, "wait", agent_id) == 0
        assert cli(grpc_addr, "close", agent_id) == 0
        follower.join(30)
        writer.close()
        lines = reader.read().splitlines()
    assert codes == [0]
    assert seqs(lines) == [3, 4]
    assert lines[-1].split("  ")[2:] == ["assistant_message", "live"]

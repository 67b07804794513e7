"""The CLI explains itself and fits the terminal: --version, status, help that says what each
command does and answers, shell completion, `show`, one `ls` line per agent at 80 columns,
turn boundaries in follow modes, and --json that prints only JSON."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from corral_cli.arguments import build_parser
from corral_cli.main import main
from corral_server.app import Config
from tests.support.daemon import DaemonProcess, DaemonThread, running_daemon

Capture = pytest.CaptureFixture[str]
CORRAL = [sys.executable, "-m", "corral_cli.main"]
GLOBALS = ("--addr", "--json", "--timeout", "--token-file", "--tls-ca", "--tls-cert", "--tls-key")


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def new_agent(addr: str, cwd: Path, capsys: Capture, *options: str, prompt: str = "hi") -> str:
    assert cli(addr, "run", "--cwd", str(cwd), *options, prompt) == 0
    match = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert match is not None
    return match.group(1)


def commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices is not None
    return [name for name in sub.choices if name != "serve"]


def test_version_prints_the_package_version(capsys: Capture, tmp_path: Path) -> None:
    from importlib.metadata import version

    # No daemon there (one that answers adds its own line: test_cli_server_info.py).
    assert main(["--addr", f"unix:{tmp_path / 'none'}", "--version"]) == 0
    assert capsys.readouterr().out == f"corral {version('corral')}\n"


@pytest.mark.parametrize("command", commands())
def test_each_commands_help_says_what_it_does_its_outcomes_and_exit_codes_only(
    command: str, capsys: Capture
) -> None:
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    usage, summary, *_ = text.split("\n\n")
    assert summary.endswith(".") and "\n" not in summary  # one sentence first
    assert "exit codes (every command): 0 ok" in text
    for flag in GLOBALS:  # listed once, in `corral --help`
        assert flag not in usage and f"  {flag}" not in text
    assert "see corral --help" in text
    lines = text.splitlines()
    for line, after in zip(lines, [*lines[1:], ""], strict=True):  # every option explains itself
        bare = re.fullmatch(r"  (-\S+)( \S+)?", line)  # no help on its line: it must follow
        assert bare is None or after.startswith(" " * 8), f"{command}: {line!r} has no help"


def test_the_global_options_are_listed_once_in_corral_help(capsys: Capture) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for flag in GLOBALS:
        assert text.count(f"  {flag}") == 1, flag
    assert all(f"    {name} " in text for name in commands())


def test_status_says_serving_and_counts_agents_by_state(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    with running_daemon(Config()) as daemon:
        new_agent(daemon.address, tmp_path, capsys)
        closed = new_agent(daemon.address, tmp_path, capsys)
        assert cli(daemon.address, "close", closed) == 0
        capsys.readouterr()
        assert cli(daemon.address, "status") == 0
        out = capsys.readouterr().out.splitlines()
        assert out[:2] == [f"{daemon.address}: serving", "agents: 2 (1 closed, 1 idle)"]
        assert cli(daemon.address, "--json", "status") == 0
        answer = json.loads(capsys.readouterr().out)
        assert (answer["state"], answer["agents"]) == ("serving", {"closed": 1, "idle": 1})
    assert cli(daemon.address, "status") == 1  # stopped: nobody answers
    assert capsys.readouterr().out.startswith(f"{daemon.address}: not reachable (UNAVAILABLE")


def test_completion_bash_is_valid_bash_and_completes_commands_and_options(
    tmp_path: Path, capsys: Capture
) -> None:
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "corral.bash"
    script.write_text(capsys.readouterr().out)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        probe = (
            f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _corral; "
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert complete("corral", "l") == ["ls", "logs"]
    assert complete("corral", "--addr", "h:1", "sh") == ["show"]
    assert complete("corral", "send", "abc", "--q") == ["--queue"]
    assert complete("corral", "send", "abc", "--if-running", "") == [
        "reject",
        "queue",
        "steer",
        "replace",
    ]
    assert complete("corral", "logs", "--un") == ["--until-idle"]


def test_completion_zsh_loads_the_same_completion_through_bashcompinit(capsys: Capture) -> None:
    assert main(["completion", "zsh"]) == 0
    script = capsys.readouterr().out
    assert "bashcompinit" in script and "complete -o default -F _corral corral" in script


def test_ls_fits_80_columns_with_the_id_whole_and_show_gives_the_rest(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    addr = grpc_server.address
    team = uuid.uuid4().hex
    title = "a title far too long to fit in any column of a table " * 3
    agent_id = new_agent(addr, tmp_path, capsys, "--label", f"team={team}", "--title", title)
    assert cli(addr, "send", agent_id, "/permission write\n/reply ok") == 0
    assert cli(addr, "wait", agent_id) == 0  # on the permission
    assert cli(addr, "send", agent_id, "--queue", "later please") == 0
    capsys.readouterr()
    assert cli(addr, "ls", "-l", f"team={team}") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert len(header) <= 80
    assert len(row) == 80 and row.endswith("…")
    assert row.split("  ")[:2] == [agent_id, "running, 1 perm"]
    assert re.search(r"  1 +[-:\d]+  scrip", row)  # queued, updated; the provider cut
    assert cli(addr, "show", agent_id) == 0
    shown = capsys.readouterr().out
    assert f"title       {title.strip()}\n" in shown
    assert "\nqueued      1\n" in shown and "  later please\n" in shown
    assert f"\nlabels      team={team}\n" in shown
    assert cli(addr, "permit", agent_id) == 0
    assert cli(addr, "wait", agent_id) == 0


def test_ls_all_marks_archived_agents_and_show_lists_children(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    team = uuid.uuid4().hex
    parent = new_agent(addr, tmp_path, capsys, "--label", f"team={team}")
    assert cli(addr, "spawn", parent, "/reply child", "--wait") == 0
    child = re.search(r"child (\S+)", capsys.readouterr().err)
    assert child is not None
    assert cli(addr, "show", parent) == 0
    assert f"\nchildren    1\n              {child.group(1)}  idle\n" in capsys.readouterr().out
    closed = new_agent(addr, tmp_path, capsys, "--label", f"team={team}")
    assert cli(addr, "close", closed) == 0
    assert cli(addr, "archive", parent) == 0
    capsys.readouterr()
    assert cli(addr, "ls", "--all", "-l", f"team={team}") == 0
    states = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]}
    assert states == {parent: "archived", closed: "closed"}


def test_follow_modes_print_turn_boundaries_with_the_reason(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    addr = grpc_server.address
    agent_id = new_agent(addr, tmp_path, capsys)
    hub = grpc_server.daemon.hub if grpc_server.daemon is not None else None
    assert hub is not None
    codes: list[int] = []
    follower = threading.Thread(target=lambda: codes.append(cli(addr, "attach", agent_id)))
    follower.start()
    while not any(agent_id in sub.scope for sub in hub.subscriptions):
        threading.Event().wait(0.01)
    assert cli(addr, "send", agent_id, "-f", "/fail disk full") == 1
    assert cli(addr, "send", agent_id, "/sleep 600000") == 0
    assert cli(addr, "cancel", agent_id) == 0
    assert cli(addr, "close", agent_id) == 0
    follower.join(30)
    assert codes == [0]
    err = capsys.readouterr().err
    turns = re.findall(r"^turn (turn-\S+) (started|failed|canceled|completed)(.*)$", err, re.M)
    failed = [t for t in turns if t[1] == "failed"]
    # attach prints the reason, send -f the turn's end alone (its error follows on its own
    # line); the two threads' lines come in either order
    assert sorted(t[2] for t in failed) == ["", ": disk full (SCRIPTED_FAILURE)"]
    canceled = [t for t in turns if t[1] == "canceled"]
    assert len(canceled) == 1 and canceled[0][2].startswith(": ")
    assert sum(t[1] == "started" for t in turns) == 3  # attach twice, send -f once


def test_run_and_send_follow_print_the_same_rows_for_the_same_script(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    addr = grpc_server.address
    script = "/history 2\n/think hmm\n/reply done\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    assert cli(addr, "run", "--cwd", str(tmp_path), "-") == 0
    ran = capsys.readouterr()
    agent_id = ran.err.split()[1]
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    assert cli(addr, "send", agent_id, "-f", "-") == 0
    sent = capsys.readouterr()
    assert ran.out == sent.out == "done\n"  # no /history row either way

    def rows(err: str) -> list[str]:
        return [line for line in err.splitlines() if not line.startswith(("agent ", "turn "))]

    assert rows(ran.err) == rows(sent.err) == ["· thinking: hmm"]


def test_json_prints_proto_field_names_and_nothing_else(
    grpc_server: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    assert cli(grpc_server.address, "--json", "run", "--cwd", str(tmp_path), "/think a") == 0
    out, err = capsys.readouterr()
    assert err == ""  # no `agent ID`, no turn lines
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["agent"]["provider_session_id"] and "turn_id" in lines[0]
    assert "turn_completed" in lines[-1]


def test_status_tells_a_standby_and_a_draining_daemon_apart(
    tmp_path: Path, capsys: Capture
) -> None:
    state = tmp_path / "state"
    serving = DaemonProcess(state, "--drain-delay-s", "60").start()
    standby = DaemonProcess(state, "--standby").start(expect_ready=False)
    try:
        assert standby.proc is not None and standby.proc.stdout is not None
        found = re.search(r"standby on (\S+):(\d+)", standby.proc.stdout.readline())
        assert found is not None
        waiting = f"127.0.0.1:{found.group(2)}"
        assert cli(waiting, "status") == 0
        assert capsys.readouterr().out.startswith(f"{waiting}: standby (health NOT_SERVING)\n")
        assert serving.proc is not None
        serving.proc.send_signal(signal.SIGTERM)
        serving.wait_for_log("draining")  # health is NOT_SERVING for the drain delay
        assert cli(serving.address, "status") == 0
        out = capsys.readouterr().out.splitlines()
        assert out[:2] == [f"{serving.address}: draining (health NOT_SERVING)", "agents: none"]
        serving.proc.send_signal(signal.SIGTERM)  # a second signal ends the delay
        assert serving.wait(30)[0] == 0
    finally:
        serving.stop()
        standby.stop()

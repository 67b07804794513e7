"""The README's CLI session, run as written: each `$ ` line through bash with `corral` on PATH
against a fresh daemon, its stdout and stderr together compared with the lines under it.

In the README, AGENT and TURN stand for whole ids (AGENT is the agent the first command made),
TIME and DATE for a time (or an earlier day's date) and a date, ADDR for the daemon's address,
VERSION for the package's, INCARNATION and REVISION for its event log's; runs of spaces are
column padding and match any run of spaces."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from corral_server.app import Config
from tests.support.daemon import running_daemon

README = Path(__file__).resolve().parents[2] / "README.md"
PLACEHOLDERS = {
    "AGENT": r"[0-9a-f]{32}",
    "TURN": r"turn-[0-9a-f]{32}",
    "TIME": r"(?:\d\d:\d\d:\d\d|\d{4}-\d\d-\d\d)",  # an earlier day's is its date
    "DATE": r"\d{4}-\d\d-\d\d",
    "INCARNATION": r"[0-9a-f]{32}",
    "REVISION": r"\d+",
}


def session() -> list[tuple[str, list[str]]]:
    """The README's `console` block: (command, expected lines) pairs."""
    text = README.read_text()
    block = text.split("## The CLI", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def pattern(line: str, addr: str) -> str:
    escaped = re.escape(line.replace("ADDR", addr).replace("VERSION", version("corral")))
    for word, regex in PLACEHOLDERS.items():
        escaped = re.sub(rf"\b{word}\b", regex.replace("\\", "\\\\"), escaped)
    return re.sub(r"(\\ ){2,}", "  +", escaped)


def test_the_readme_cli_session_prints_what_the_readme_says(tmp_path: Path) -> None:
    wrapper = tmp_path / "bin" / "corral"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m corral_cli.main "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    steps = session()
    assert len(steps) >= 10
    with running_daemon(Config()) as daemon:
        env = dict(
            os.environ,
            CORRAL_ADDR=daemon.address,
            PATH=f"{wrapper.parent}:{os.environ['PATH']}",
            COLUMNS="80",
        )
        agent = ""
        for command, expected in steps:
            done = subprocess.run(
                ["bash", "-c", f"{command.replace('AGENT', agent)} 2>&1"],
                capture_output=True,
                text=True,
                env=env,
                cwd=tmp_path,
                timeout=60,
            )
            printed = done.stdout.splitlines()
            assert len(printed) == len(expected), (command, printed)
            for line, want in zip(printed, expected, strict=True):
                assert re.fullmatch(pattern(want, daemon.address), line), (command, line, want)
            if not agent:
                agent = printed[0].split()[1]

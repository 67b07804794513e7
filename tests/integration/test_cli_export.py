"""`corral export` and `corral import FILE` against a real daemon, in-process: an export to a
file and to stdout, its import as a new agent whose own export matches, Markdown, and a cut
file refused with its line (exit 2) and nothing created."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.integration.test_cli_usage import durable  # noqa: F401 (the fixture)
from tests.support.daemon import DaemonThread

Capture = pytest.CaptureFixture[str]


def cli(addr: str, *argv: str) -> int:
    return main(["--addr", addr, *argv])


def test_export_then_import_makes_the_same_agent_again(
    durable: DaemonThread,  # noqa: F811
    tmp_path: Path,
    capsys: Capture,
) -> None:
    addr = durable.address
    assert cli(addr, "run", "--cwd", str(tmp_path), "/think hmm\n/reply a fine answer") == 0
    found = re.search(r"^agent (\S+)$", capsys.readouterr().err, re.MULTILINE)
    assert found is not None
    original = found.group(1)
    exported = tmp_path / "agent.jsonl"
    assert cli(addr, "export", original[:8], "-o", str(exported)) == 0
    data = exported.read_bytes()
    assert json.loads(data.splitlines()[0])["agent"]["id"] == original

    assert cli(addr, "import", str(exported)) == 0
    line = capsys.readouterr().out.strip()
    imported, _, rest = line.partition(" imported: ")
    assert rest == "scripted, 3 rows, idle" and imported != original
    assert cli(addr, "export", imported) == 0
    again = capsys.readouterr().out.encode()
    assert [json.loads(x).get("item") for x in again.splitlines()[1:]] == [
        json.loads(x).get("item") for x in data.splitlines()[1:]
    ]

    assert cli(addr, "export", original, "--format", "markdown") == 0
    assert "a fine answer" in capsys.readouterr().out

    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(data.splitlines(keepends=True)[:-1]))
    assert cli(addr, "import", str(cut)) == 2
    err = capsys.readouterr().err
    assert "BAD_IMPORT_FILE" in err and "line 5" in err
    assert cli(addr, "--json", "ls", "--all") == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # the original and one import

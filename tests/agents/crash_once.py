"""Runs one of the stand-in agents of tests/unit/providers (claude_code_stub.py, codex_stub.py,
acp_stub.py) in `crash` mode the first time and in `echo` mode every later time: an agent
process that dies mid-turn once, so a test can see the next turn recover in a new process.

    python crash_once.py STUB MARKER_FILE [the stub's arguments...]

The first run creates MARKER_FILE; a run that finds it echoes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

stub, marker, *rest = sys.argv[1:]
first = not Path(marker).exists()
Path(marker).touch()
mode = "crash" if first else "echo"
os.execv(sys.executable, [sys.executable, stub, mode, *rest])

"""`corral serve` stopped by Ctrl-C (SIGINT) or SIGTERM before it serves: one line, exit 0, no
traceback, no start-up line. The start-up is held at a known point: reading its providers file,
a FIFO the test opens and writes only after the signal was sent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SERVE = [sys.executable, "-m", "corral_cli.main", "serve"]
TIMEOUT = 60.0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_start_up_stops_it_with_one_line(
    tmp_path: Path, sig: signal.Signals
) -> None:
    providers = tmp_path / "providers.toml"
    os.mkfifo(providers)
    argv = ["--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "state")]
    argv += ["--config", str(providers), "--drain-delay-s", "0"]
    proc = subprocess.Popen(
        [*SERVE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # Opening a FIFO for writing returns once the daemon has opened it to read: from then
        # on it waits in that read until the file's text comes.
        with providers.open("w") as fifo:
            proc.send_signal(sig)
            fifo.write('[providers.demo]\nkind = "scripted"\n')
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    assert out == ""  # it never said it serves
    (line,) = err.splitlines()
    assert line.endswith("INFO corral: stopped by a signal during start-up"), err

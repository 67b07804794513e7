"""`corral serve` refusing to start: one clear line on stderr, exit 2, no drain, nothing created
(a port in use, a state directory it cannot make or read, a bad flag)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import DaemonProcess

SERVE = [sys.executable, "-m", "corral_cli.main", "serve"]


def refused(*argv: str) -> tuple[int, str, str]:
    done = subprocess.run([*SERVE, *argv], capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def test_a_port_in_use_is_one_line_exit_two_no_drain_and_no_state_directory(
    tmp_path: Path,
) -> None:
    state = tmp_path / "never-made"
    with socket.socket() as holder:  # any process listening there, not only a daemon
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        code, out, err = refused("--listen", address, "--state-dir", str(state))
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()  # no C-core line, no drain, no second copy
    assert line.endswith(
        f"ERROR corral: cannot start: cannot listen on {address} (--listen): "
        "Address already in use (is another corral daemon running?)"
    )
    assert not state.exists()


def test_a_second_corral_daemon_on_the_port_is_refused_the_same_way(tmp_path: Path) -> None:
    served = DaemonProcess(tmp_path / "first", "--drain-delay-s", "0").start()
    try:
        code, _, err = refused("--listen", served.address, "--state-dir", str(tmp_path / "x"))
    finally:
        served.stop()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def test_a_state_directory_that_cannot_be_made_is_one_line_and_exit_two(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = refused("--listen", "127.0.0.1:0", "--state-dir", str(blocker / "state"))
    assert code == 2
    (line,) = err.splitlines()
    assert line.endswith(f"cannot start: the state directory {blocker / 'state'}: Not a directory")


def test_a_bad_flag_is_one_line_and_exit_two(tmp_path: Path) -> None:
    code, out, err = refused("--listen", "127.0.0.1:0", "--drain-grace-s", "soon")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "corral serve: error: argument --drain-grace-s: invalid float value: 'soon' "
        "(see corral serve --help)"
    ]


def test_every_serve_option_has_help_text() -> None:
    done = subprocess.run([*SERVE, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    for line, after in zip(lines, [*lines[1:], ""], strict=False):
        bare = re.fullmatch(r"  (-\S+)( \S+)?", line)  # no help on its line: it must follow
        assert bare is None or after.startswith(" " * 8), f"{line!r} has no help"


def test_a_web_port_in_use_is_refused_the_same_way(tmp_path: Path) -> None:
    state = tmp_path / "never-made"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        web = f"127.0.0.1:{holder.getsockname()[1]}"
        code, _, err = refused(
            "--listen", "127.0.0.1:0", "--web-listen", web, "--state-dir", str(state)
        )
    assert code == 2
    (line,) = err.splitlines()
    assert f"cannot start: cannot listen on {web} (--web-listen): Address already in use" in line
    assert not state.exists()


def test_a_bad_file_found_after_the_lock_leaves_no_state_directory(tmp_path: Path) -> None:
    state = tmp_path / "never-kept"
    missing = tmp_path / "no-such-tokens"
    code, _, err = refused(
        "--listen", "127.0.0.1:0", "--state-dir", str(state), "--auth-token-file", str(missing)
    )
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "cannot start" in err
    assert not state.exists()

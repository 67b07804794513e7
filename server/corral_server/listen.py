"""Listen addresses: `HOST:PORT` (TCP) or `unix:PATH` (a Unix socket, grpc's own syntax; also
`unix:///abs/path`), which of them are local, whether a TCP port is taken, and the Unix socket
made private.

A Unix socket is reachable only through its path: connecting needs write permission on the
socket file, and reaching it needs search permission on every directory above. So the socket is
chmod 0600 right after the bind (grpc binds in `add_*_port`, before the server accepts), and
its directory must not let another user replace it: `socket_dir_problem` refuses a directory
owned by another user (root excepted) or writable by group or others without the sticky bit
(with it, as in /tmp, others cannot rename or remove our socket, but can take the path while no
daemon holds it: a warning).

Must not: import grpc (app.py binds; this module only checks and fixes paths).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from pathlib import Path

UNIX = "unix:"
SOCKET_MODE = 0o600


def unix_path(listen: str) -> Path | None:
    """The socket path of a `unix:PATH` address, else None."""
    if not listen.startswith(UNIX):
        return None
    rest = listen[len(UNIX) :]
    if rest.startswith("//"):  # unix:///abs/path
        rest = rest[2:]
    return Path(rest)


def is_loopback(listen: str) -> bool:
    """`HOST:PORT` names this machine's loopback interface."""
    return is_loopback_host(listen.rsplit(":", 1)[0])


def is_loopback_host(host: str) -> bool:
    """`host` (a name or an address, IPv6 with or without brackets) is "localhost" or a
    loopback address."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_local(listen: str) -> bool:
    """Only this machine can connect: a loopback address or a Unix socket."""
    return unix_path(listen) is not None or is_loopback(listen)


def socket_dir_problem(path: Path) -> tuple[str, str]:
    """(refusal, warning) about the directory that will hold the socket `path`; "" for none."""
    directory = path.parent
    try:
        info = directory.stat()
    except OSError as exc:
        return f"cannot use {directory} for the socket: {exc.strerror or exc}", ""
    if not stat.S_ISDIR(info.st_mode):
        return f"{directory} is not a directory", ""
    if info.st_uid not in (os.geteuid(), 0):
        return f"{directory} belongs to uid {info.st_uid}: it could replace the socket", ""
    if info.st_mode & 0o022:
        if not info.st_mode & stat.S_ISVTX:
            return (
                f"{directory} is writable by other users: they could replace the socket "
                "(use a private directory, e.g. the state directory or $XDG_RUNTIME_DIR)",
                "",
            )
        return "", (
            f"{directory} is shared (sticky, writable by others): another user can take "
            f"{path.name} while no daemon holds it; a private directory is safer"
        )
    return "", ""


def socket_in_use(path: Path) -> bool:
    """Whether a server answers on the socket `path` (grpc would unlink it and bind anew)."""
    if not path.is_socket():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False  # a stale socket of a daemon that stopped: grpc replaces it
    return True


def make_socket_private(path: Path) -> int:
    """chmod the freshly bound socket 0600; its inode (to remove only ours at the end)."""
    os.chmod(path, SOCKET_MODE)
    return os.stat(path).st_ino


def remove_socket(path: Path, inode: int) -> None:
    """Remove the socket file if it is still the one we bound."""
    try:
        info = os.lstat(path)
        if stat.S_ISSOCK(info.st_mode) and info.st_ino == inode:
            path.unlink()
    except OSError:
        pass


def port_taken(listen: str, flag: str = "--listen") -> str:
    """Why `listen` cannot be bound (another process listens there), or "". Checked before
    anything is created; port 0 is always free. Binding with SO_REUSEADDR, as a server
    does, so a port whose old connections linger is not mistaken for a taken one."""
    host, _, port = listen.rpartition(":")
    if port == "0" or not port.isdigit():
        return ""  # port 0 picks a free one; a malformed address fails at bind, as before
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot listen on {listen} ({flag}): {exc.strerror}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return (
                f"cannot listen on {listen} ({flag}): {exc.strerror} "
                "(is another corral daemon running?)"
            )
    return ""

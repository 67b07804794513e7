"""Certificate authorities for TLS tests, made with the `openssl` command (no Python crypto
package needed): an authority, and server or client certificates it signs for 127.0.0.1."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

# A P-256 key: quick to make, accepted by gRPC's BoringSSL and by Go (grpcurl).
_NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def make_authority(directory: Path, name: str) -> KeyPair:
    """A self-signed certificate authority `name` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(directory / f"{name}.pem", directory / f"{name}.key")
    _openssl(
        "req", "-x509", *_NEW_KEY, "-keyout", str(pair.key), "-out", str(pair.cert),
        "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return pair


def issue(authority: KeyPair, directory: Path, name: str, *, server: bool) -> KeyPair:
    """A certificate `name` signed by `authority`: for a server on 127.0.0.1 / localhost, or
    for a client."""
    pair = KeyPair(directory / f"{name}.pem", directory / f"{name}.key")
    request = directory / f"{name}.csr"
    extensions = directory / f"{name}.ext"
    usage = "serverAuth" if server else "clientAuth"
    extensions.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        f"extendedKeyUsage={usage}\n"
        + ("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else "")
    )
    _openssl(
        "req", "-new", *_NEW_KEY, "-keyout", str(pair.key), "-out", str(request),
        "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(authority.cert),
        "-CAkey", str(authority.key), "-set_serial", "0x" + name.encode().hex()[:30],
        "-days", "2", "-extfile", str(extensions), "-out", str(pair.cert),
    )  # fmt: skip
    return pair

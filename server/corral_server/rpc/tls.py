"""TLS for the listener: the certificate files read at start-up, and the server credentials.

With `client_ca` the listener is mutual TLS: every client must present a certificate signed by
that authority, or the handshake fails. Must not: fall back to plaintext.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


class TlsFileError(ValueError):
    """A certificate or key file cannot be read; the message names the file and the flag."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    # Present: client certificates are required and verified against this authority.
    client_ca: Path | None = None


def _read(path: Path, flag: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TlsFileError(f"{flag} {path}: cannot read it: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise TlsFileError(f"{flag} {path}: not a PEM file")
    return data


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Credentials for `add_secure_port`; TlsFileError when a file is unreadable or not PEM."""
    key = _read(files.key, "--tls-key")
    cert = _read(files.cert, "--tls-cert")
    client_ca = _read(files.client_ca, "--tls-client-ca") if files.client_ca else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )

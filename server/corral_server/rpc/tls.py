"""TLS for the listener: the certificate files read at start-up, and the server credentials.

With `client_ca` the listener is mutual TLS: every client must present a certificate signed by
that authority, or the handshake fails. Must not: fall back to plaintext.
"""

from __future__ import annotations

import ssl
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


def _check(files: TlsFiles) -> None:
    """Load the files into an `ssl` context first: gRPC says only "Failed to bind" when the
    key does not match the certificate or a file is not a certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An empty password: an encrypted key fails here instead of prompting on a terminal
        # (gRPC cannot use one).
        context.load_cert_chain(files.cert, files.key, password=b"")
    except ssl.SSLError as exc:
        raise TlsFileError(
            f"--tls-cert {files.cert} and --tls-key {files.key} are not a certificate and its "
            f"unencrypted private key ({exc.reason or exc})"
        ) from None
    if files.client_ca is not None:
        try:
            context.load_verify_locations(cafile=files.client_ca)
        except ssl.SSLError as exc:
            raise TlsFileError(
                f"--tls-client-ca {files.client_ca}: not a certificate ({exc.reason or exc})"
            ) from None


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Credentials for `add_secure_port`; TlsFileError when a file is unreadable, not PEM, or
    the key does not belong to the certificate."""
    key = _read(files.key, "--tls-key")
    cert = _read(files.cert, "--tls-cert")
    client_ca = _read(files.client_ca, "--tls-client-ca") if files.client_ca else None
    _check(files)
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )

"""The store's errors: what went wrong, with the path and versions a human needs to act.

    CorralError (corral_server.errors)
    └── StoreError                 the embedded store failed             -> INTERNAL (today)
        ├── StoreUnavailable       it cannot be opened or is closed: read-only or missing
        │                          directory, not a database, held by another daemon
        ├── SchemaTooNew           written by a newer corral: refused, never downgraded
        └── StoreWriteFailed       a commit failed (disk full, I/O error); every write
                                   queued behind it failed with it, nothing was half-written

None of them is a bug of the caller: each says what to fix (free disk, a writable
`--state-dir`, a newer corral). They live here rather than in corral_server/errors.py only
because this package was built beside the daemon; the tree above is where they belong.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from corral_server.errors import CorralError


class StoreError(CorralError):
    reason = "STORE_ERROR"


class StoreUnavailable(StoreError):
    reason = "STORE_UNAVAILABLE"

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"the store {path} cannot be used: {why}", metadata={"path": str(path)})
        self.path = path


class SchemaTooNew(StoreError):
    reason = "STORE_SCHEMA_TOO_NEW"

    def __init__(self, path: Path, found: int, supported: int) -> None:
        super().__init__(
            f"the store {path} has schema version {found}, but this corral knows versions up "
            f"to {supported}: run a newer corral, or point --state-dir elsewhere",
            metadata={"path": str(path), "found": str(found), "supported": str(supported)},
        )
        self.path = path
        self.found = found
        self.supported = supported


class StoreWriteFailed(StoreError):
    reason = "STORE_WRITE_FAILED"

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            f"the store {path} could not commit: {why}; nothing of this write was kept",
            metadata={"path": str(path)},
        )
        self.path = path


def why(exc: sqlite3.Error) -> str:
    """SQLite's message, with what to check when it names a common cause."""
    text = str(exc)
    if "readonly" in text or "unable to open" in text:
        return f"{text} (is the state directory writable?)"
    if "not a database" in text:
        return f"{text} (is this a corral state directory?)"
    return text

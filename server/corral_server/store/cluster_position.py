"""How far a cluster node's read model followed the stream (schema v12): the last stream
sequence applied, and the node of each agent's last claim, in the tables `cluster_followed` and
`cluster_owners` (docs/cluster.md#read-model).

A position write joins the database's group commit (store/commits.py) after the rows, records
and events it follows were handed to their stores, so it commits in the same transaction as
they do: a node killed at any point restarts from a position whose batches are all applied,
and none of them twice.

Must not: run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from functools import partial

from corral_server.store.commits import GroupCommit, Job, settle_all
from corral_server.store.database import Database


@dataclass(frozen=True)
class Followed:
    """What a node had applied when it stopped: the sequence and the agents' claim owners."""

    sequence: int
    owners: dict[str, str] = field(default_factory=dict)


class ClusterPosition:
    def __init__(self, database: Database, stream: str) -> None:
        self._db = database
        self._stream = stream
        self._sequence: int | None = None  # waiting for the next commit
        self._owners: dict[str, str] = {}
        self._futures: list[asyncio.Future[None]] = []
        self._commits = GroupCommit(database, self._take)

    async def load(self) -> Followed:
        return await self._db.read(partial(_load, self._stream))

    def put(self, sequence: int, owners: dict[str, str]) -> asyncio.Future[None]:
        """Applied up to `sequence`, and these agents' claims: resolves once committed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sequence = sequence
        self._owners.update(owners)
        self._futures.append(future)
        self._commits.wake()
        return future

    def _take(self) -> Job | None:
        if self._sequence is None:
            return None
        sequence, owners, futures = self._sequence, self._owners, self._futures
        self._sequence, self._owners, self._futures = None, {}, []
        return Job(
            partial(_write, self._stream, sequence, owners),
            lambda _: settle_all(futures, True, None),
            lambda error: settle_all(futures, False, error),
        )


def _write(stream: str, sequence: int, owners: dict[str, str], conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO cluster_followed (stream, sequence) VALUES (?, ?)"
        " ON CONFLICT (stream) DO UPDATE SET sequence = excluded.sequence",
        (stream, sequence),
    )
    conn.executemany(
        "INSERT INTO cluster_owners (agent_id, node) VALUES (?, ?)"
        " ON CONFLICT (agent_id) DO UPDATE SET node = excluded.node",
        list(owners.items()),
    )


def _load(stream: str, conn: sqlite3.Connection) -> Followed:
    found = conn.execute("SELECT sequence FROM cluster_followed WHERE stream = ?", (stream,))
    row = found.fetchone()
    owners = dict(conn.execute("SELECT agent_id, node FROM cluster_owners"))
    return Followed(int(row[0]) if row else 0, {str(k): str(v) for k, v in owners.items()})

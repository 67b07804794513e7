"""GetChanges: the files that differ in an agent's workspace (its worktree, or the repository
its cwd is in), since its base, its last turn's start, or a commit; paged, and with the
unified diffs asked for, so that every answer stays far under a client's 4 MiB.

The working tree is compared as trees.py captures it: uncommitted and untracked files count.

Must not: change anything in the repository (trees.py's captures touch no index or ref).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import assert_never

from corral_server import errors
from corral_server.domain.agent import Agent
from corral_server.domain.workspace import (
    ChangesPage,
    ChangesQuery,
    ChangesSince,
    FileChange,
    FileDiff,
)
from corral_server.workspace.errors import NoWorkspace
from corral_server.workspace.trees import Trees, base_of, resolve
from corral_server.workspace.turn_trees import TurnTrees

DEFAULT_PAGE_FILES = 200
MAX_PAGE_FILES = 1_000
# A page also ends before this many bytes of paths (at least one file): 1,000 paths of 4 KiB
# would be 4 MiB alone.
MAX_PAGE_PATH_BYTES = 1 << 20
MAX_DIFF_PATHS = 16
MAX_PATH_CHARS = 4_096
DEFAULT_DIFF_BYTES = 256 << 10
MAX_DIFF_BYTES = 1 << 20
# All diffs of one answer: with the page's paths, under 4 MiB whatever is asked.
MAX_DIFFS_BYTES = 2 << 20


class NoTurnRecorded(errors.FailedPrecondition):
    reason = "NO_TURN_RECORDED"

    def __init__(self, agent_id: str) -> None:
        super().__init__(
            f"agent {agent_id!r} has run no turn since the daemon started: nothing to compare"
            " with (ask since its base or a commit)",
            metadata={"agent_id": agent_id},
        )


@dataclass(frozen=True, slots=True)
class Changes:
    trees: Trees
    turns: TurnTrees

    async def get(self, agent: Agent, query: ChangesQuery) -> ChangesPage:
        offset = check_query(query)
        if agent.workspace is not None and not await asyncio.to_thread(
            Path(agent.workspace.path).is_dir
        ):
            raise NoWorkspace(agent.id, "has no worktree any more: it was removed")
        top = await self.trees.top_level(agent.cwd)
        since = await self._since(agent, top, query)
        now = await self.trees.snapshot(top)
        files = await self.trees.changes(top, since, now)
        page, token = _page(files, offset, query.page_size or DEFAULT_PAGE_FILES)
        diffs = await self._diffs(top, since, now, files, query)
        return ChangesPage(
            repository=str(top),
            since_tree=since,
            files=tuple(page),
            next_page_token=token,
            total_files=len(files),
            lines_added=sum(f.lines_added for f in files),
            lines_removed=sum(f.lines_removed for f in files),
            diffs=tuple(diffs),
        )

    async def _since(self, agent: Agent, top: Path, query: ChangesQuery) -> str:
        match query.since:
            case ChangesSince.BASE:
                return await base_of(self.trees.git, agent.workspace, top)
            case ChangesSince.COMMIT:
                return await resolve(self.trees.git, top, query.commit, "commit")
            case ChangesSince.LAST_TURN:
                tree = await self.turns.before_last_turn(agent.id)
                if tree is None:
                    raise NoTurnRecorded(agent.id)
                return tree
            case _:
                assert_never(query.since)

    async def _diffs(
        self, top: Path, since: str, now: str, files: list[FileChange], query: ChangesQuery
    ) -> list[FileDiff]:
        by_path = {f.path: f for f in files}
        limit = query.max_diff_bytes or DEFAULT_DIFF_BYTES
        budget = MAX_DIFFS_BYTES
        diffs = []
        for path in query.diff_paths:
            change = by_path.get(path)
            if change is None:
                diffs.append(FileDiff(path, ""))
                continue
            diff = await self.trees.diff(top, since, now, change, min(limit, budget))
            budget -= len(diff.diff.encode())
            diffs.append(diff)
        return diffs


def check_query(query: ChangesQuery) -> int:
    """INVALID_ARGUMENT for a query past its bounds; the page's first file otherwise."""
    if query.since is ChangesSince.COMMIT and not query.commit:
        raise errors.InvalidArgument.field("commit", "required with CHANGES_SINCE_COMMIT")
    if len(query.commit) > MAX_PATH_CHARS:
        raise errors.InvalidArgument.field("commit", f"at most {MAX_PATH_CHARS} characters")
    if query.page_size > MAX_PAGE_FILES:
        raise errors.InvalidArgument.field("page_size", f"at most {MAX_PAGE_FILES}")
    if query.max_diff_bytes > MAX_DIFF_BYTES:
        raise errors.InvalidArgument.field("max_diff_bytes", f"at most {MAX_DIFF_BYTES}")
    if len(query.diff_paths) > MAX_DIFF_PATHS:
        raise errors.InvalidArgument.field("diff_paths", f"at most {MAX_DIFF_PATHS} paths")
    for path in query.diff_paths:
        if not path or len(path) > MAX_PATH_CHARS:
            raise errors.InvalidArgument.field(
                "diff_paths", f"each path 1 to {MAX_PATH_CHARS} characters"
            )
        if path.startswith("/") or ".." in Path(path).parts:
            raise errors.InvalidArgument.field(
                "diff_paths", f"{path[:200]!r} is outside the repository: name it from its top"
            )
    if not query.page_token:
        return 0
    if not query.page_token.isdigit() or len(query.page_token) > 9:
        raise errors.InvalidArgument.field("page_token", "not a token GetChanges gave")
    return int(query.page_token)


def _page(files: list[FileChange], offset: int, size: int) -> tuple[list[FileChange], str]:
    page: list[FileChange] = []
    path_bytes = 0
    for change in files[offset : offset + size]:
        path_bytes += len(change.path.encode()) + len(change.old_path.encode())
        if page and path_bytes > MAX_PAGE_PATH_BYTES:
            break
        page.append(change)
    end = offset + len(page)
    return page, str(end) if end < len(files) else ""

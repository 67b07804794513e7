"""Working trees as git trees, and what differs between two trees.

A working tree's state, untracked files included (what .gitignore leaves out stays out), is
captured as a git tree object without touching the user's index or any ref: the index is
copied to a temporary file and `git add -A` and `git write-tree` run on that copy
(`GIT_INDEX_FILE`). The copy keeps the index's stat cache, so only changed files are hashed.
Comparing two such trees (or a commit and a tree) with `git diff-tree` then gives additions,
modifications, deletions and renames alike, with their line counts and binary flags.

Must not: change the repository's index, HEAD, branches or working files.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from corral_server.domain.workspace import ChangeKind, FileChange, FileDiff, Workspace
from corral_server.workspace.errors import BadRevision, NotARepository
from corral_server.workspace.git import Git

# What a listing reads of git's output at most (paths of about 300,000 files); past it the
# listing holds the files read so far.
MAX_LISTING_BYTES = 32 << 20
# git's id of the tree with nothing in it.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_KINDS = {"A": ChangeKind.ADDED, "D": ChangeKind.DELETED, "R": ChangeKind.RENAMED}


@dataclass(frozen=True, slots=True)
class Trees:
    git: Git = field(default_factory=Git)

    async def top_level(self, cwd: str) -> Path:
        if not await asyncio.to_thread(may_be_in_repository, cwd):
            raise NotARepository(cwd)
        result = await self.git.run(cwd, "rev-parse", "--show-toplevel")
        if result.returncode != 0 or not result.text.strip():
            raise NotARepository(cwd)
        return Path(result.text.strip())

    async def snapshot(self, top: Path) -> str:
        """The tree of the working tree as it is now, untracked files included."""
        index = await self.git.check(
            top, "rev-parse", "--path-format=absolute", "--git-path", "index"
        )
        scratch = await asyncio.to_thread(tempfile.mkdtemp, prefix="corral-index-")
        try:
            copy = Path(scratch) / "index"
            await asyncio.to_thread(_copy_if_there, Path(index.strip()), copy)
            env = {"GIT_INDEX_FILE": str(copy)}
            await self.git.check(top, "add", "-A", "--", ".", env=env)
            return (await self.git.check(top, "write-tree", env=env)).strip()
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)

    async def changes(self, top: Path, since: str, now: str) -> list[FileChange]:
        """Every file that differs from `since` (a commit or tree) to `now`, by path."""
        status, counts = [
            await self.git.check(
                top, "diff-tree", "-r", "-z", "-M", option, since, now, max_bytes=MAX_LISTING_BYTES
            )
            for option in ("--name-status", "--numstat")
        ]
        numbers = _numstat(counts)
        files = []
        for kind, path, old_path in _name_status(status):
            added, removed, binary = numbers.get(path, (0, 0, False))
            files.append(FileChange(path, kind, old_path, binary, added, removed))
        return sorted(files, key=lambda f: f.path)

    async def diff(
        self, top: Path, since: str, now: str, change: FileChange, max_bytes: int
    ) -> FileDiff:
        """The unified diff of one changed file, cut at a line end past `max_bytes`."""
        paths = (change.old_path, change.path) if change.old_path else (change.path,)
        result = await self.git.run(
            top,
            "diff-tree",
            "-p",
            "-M",
            "--no-color",
            "--no-ext-diff",
            since,
            now,
            "--",
            *paths,
            max_bytes=max_bytes,
        )
        data = result.stdout
        if result.cut:
            data = data[: data.rfind(b"\n") + 1]
        return FileDiff(change.path, data.decode("utf-8", "replace"), clipped=result.cut)


async def resolve(git: Git, repository: Path | str, revision: str, field_name: str) -> str:
    """The commit `revision` names (BadRevision, on `field_name`, when none)."""
    result = await git.run(
        repository, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}"
    )
    if result.returncode != 0 or not result.text.strip():
        raise BadRevision(field_name, revision)
    return result.text.strip()


async def base_of(git: Git, workspace: Workspace | None, top: Path) -> str:
    """What "since base" compares with: the worktree's base commit, else the repository's
    HEAD (the empty tree in a repository without commits)."""
    if workspace is not None:
        return workspace.base_commit
    result = await git.run(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    return result.text.strip() if result.returncode == 0 else EMPTY_TREE


def may_be_in_repository(cwd: str) -> bool:
    """False only where git could find no repository from `cwd`: no `.git` (a directory, or
    the file of a linked worktree or submodule) in it or above it, by its real path or the
    path as given, and no GIT_DIR in the environment. A daemon's first turns look for every
    agent's repository at once; a git process each, for agents in none, held up the turns'
    acknowledgements for hundreds of milliseconds (BENCHMARKS.md, P5). Anything git could
    still find (a bare repository, a `.git` that names another place) goes to git."""
    if "GIT_DIR" in os.environ or not os.path.isdir(cwd):
        return True  # git decides, and says what is wrong
    for start in {Path(os.path.abspath(cwd)), Path(os.path.realpath(cwd))}:
        for directory in (start, *start.parents):
            if os.path.lexists(directory / ".git") or os.path.isfile(directory / "HEAD"):
                return True
    return False


def _copy_if_there(index: Path, copy: Path) -> None:
    if index.is_file():
        shutil.copyfile(index, copy)


def _name_status(text: str) -> list[tuple[ChangeKind, str, str]]:
    """`--name-status -z`: a status (R and C carry a score), then one path or two."""
    fields = text.split("\0")
    out = []
    i = 0
    while i + 1 < len(fields):
        status = fields[i]
        if status[:1] in ("R", "C"):
            if i + 2 >= len(fields):
                break  # cut short: the listing ends here
            old, new = fields[i + 1], fields[i + 2]
            kind = ChangeKind.RENAMED if status[0] == "R" else ChangeKind.ADDED
            out.append((kind, new, old if kind is ChangeKind.RENAMED else ""))
            i += 3
        else:
            out.append((_KINDS.get(status[:1], ChangeKind.MODIFIED), fields[i + 1], ""))
            i += 2
    return out


def _numstat(text: str) -> dict[str, tuple[int, int, bool]]:
    """`--numstat -z`: `added TAB removed TAB path` (`-` for a binary file), a rename's path
    empty and followed by its old and new paths."""
    fields = text.split("\0")
    out: dict[str, tuple[int, int, bool]] = {}
    i = 0
    while i < len(fields):
        parts = fields[i].split("\t", 2)
        if len(parts) != 3:
            i += 1
            continue
        added, removed, path = parts
        if not path:  # a rename: the old path, then the new one
            if i + 2 >= len(fields):
                break
            path = fields[i + 2]
            i += 3
        else:
            i += 1
        binary = added == "-"
        out[path] = (0 if binary else int(added), 0 if binary else int(removed), binary)
    return out

"""Git worktrees for agents: made at CreateAgent, released at archive, removed on request.

Where they go: `root/<repository name>-<8 hex of its path>/<branch, '/' as '-'>`, with `root`
the state directory's `worktrees/` (or Config.worktrees_dir); a daemon without a state
directory puts them beside the repository, in `<repository>.worktrees/<branch>`.

Making one checks everything first (the directory is in a repository, the base names a
commit, the branch name is valid and free) and only then runs `git worktree add`; a step
that fails leaves no branch and no directory behind. Branches are never deleted once an
agent has one: archive and close keep them.

Must not: block the loop (every git call is git.py's asyncio subprocess with a deadline).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from corral_server import errors
from corral_server.domain.agent import Agent
from corral_server.domain.workspace import Workspace, WorkspaceRelease, WorktreeRequest
from corral_server.workspace.errors import (
    AgentNotClosed,
    BranchExists,
    GitFailed,
    NotARepository,
    WorkspaceDirty,
)
from corral_server.workspace.git import Git
from corral_server.workspace.trees import resolve

MAX_BRANCH_CHARS = 256
# A derived branch holds the title's first words, up to this many characters.
_DERIVED_CHARS = 40
_PREFIX = "corral/"


@dataclass
class Worktrees:
    git: Git = field(default_factory=Git)
    # Where worktrees go (None: beside each repository).
    root: Path | None = None
    new_suffix: Callable[[], str] = lambda: secrets.token_hex(4)
    # One make at a time: two creates never derive the same free branch name.
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def make(self, cwd: str, request: WorktreeRequest, title: str) -> tuple[Workspace, str]:
        """A new worktree for an agent asked to run in `cwd`; answers it and the agent's cwd
        there (the same subdirectory of the repository)."""
        if request.branch:
            check_branch_name(request.branch)
        async with self._lock:
            repository, subdir = await self.repository_of(cwd)
            base = request.base or "HEAD"
            base_commit = await self.resolve(repository, base, "worktree.base")
            if request.branch:
                await self._check_branch(repository, request.branch)
                branch = request.branch
            else:
                branch = await self._derive_branch(repository, title)
            path = self._free_path(repository, branch)
            await self._add(repository, branch, path, base_commit)
        workspace = Workspace(str(repository), branch, base, base_commit, str(path))
        return workspace, str(path / subdir) if subdir else str(path)

    async def undo(self, workspace: Workspace) -> None:
        """Take back a worktree made for a create that then failed: its directory and its
        branch (nothing was ever committed on it)."""
        repository = Path(workspace.repository)
        await self.git.run(repository, "worktree", "remove", "--force", workspace.path)
        await self.git.run(repository, "branch", "-D", "--", workspace.branch)

    async def release_all(self, agents: Iterable[Agent]) -> list[WorkspaceRelease]:
        """ArchiveAgent's step for the agents it archived: each one's worktree released. The
        archive has happened: a git that fails keeps the worktree and says why."""
        released = []
        for agent in agents:
            if agent.workspace is None:
                continue
            try:
                released.append(await self.release(agent.id, agent.workspace))
            except errors.CorralError as exc:
                path = agent.workspace.path
                released.append(WorkspaceRelease(agent.id, path, False, exc.message[:200]))
        return released

    async def release(self, agent_id: str, workspace: Workspace) -> WorkspaceRelease:
        """Remove the worktree when it holds no uncommitted change, else keep it (the
        release says why). The branch stays either way."""
        if not await asyncio.to_thread(Path(workspace.path).is_dir):
            return WorkspaceRelease(agent_id, workspace.path, removed=False, kept_reason="gone")
        changes = await self.uncommitted(workspace)
        if changes:
            reason = f"{changes} uncommitted change{'s' if changes > 1 else ''}"
            return WorkspaceRelease(agent_id, workspace.path, removed=False, kept_reason=reason)
        result = await self.git.run(workspace.repository, "worktree", "remove", workspace.path)
        if result.returncode != 0:  # changed since we looked: git refuses, and we keep it
            reason = result.stderr.strip()[:200] or "git refused to remove it"
            return WorkspaceRelease(agent_id, workspace.path, removed=False, kept_reason=reason)
        return WorkspaceRelease(agent_id, workspace.path, removed=True)

    async def delete(self, agent_id: str, closed: bool, workspace: Workspace, force: bool) -> bool:
        """DeleteWorkspace: remove a closed agent's worktree (refusing a dirty one unless
        forced); False when it was already gone."""
        if not closed:
            raise AgentNotClosed(agent_id)
        if not await asyncio.to_thread(Path(workspace.path).is_dir):
            await self.git.run(workspace.repository, "worktree", "prune")
            return False
        if not force and (changes := await self.uncommitted(workspace)):
            raise WorkspaceDirty(workspace.path, changes)
        args = ["worktree", "remove", *(["--force"] if force else []), workspace.path]
        await self.git.check(workspace.repository, *args)
        return True

    async def uncommitted(self, workspace: Workspace) -> int:
        """How many paths differ from the branch's last commit, untracked files included."""
        text = await self.git.check(
            workspace.path, "status", "--porcelain=v1", "-z", "--untracked-files=all"
        )
        return count_status_entries(text)

    async def repository_of(self, cwd: str) -> tuple[Path, str]:
        """The top level of the worktree `cwd` is in, and cwd's path below it."""
        result = await self.git.run(cwd, "rev-parse", "--show-toplevel", "--show-prefix")
        lines = result.text.splitlines()
        if result.returncode != 0 or not lines:
            raise NotARepository(cwd)
        return Path(lines[0]), lines[1].rstrip("/") if len(lines) > 1 else ""

    async def resolve(self, repository: Path | str, revision: str, field_name: str) -> str:
        return await resolve(self.git, repository, revision, field_name)

    async def _check_branch(self, repository: Path, branch: str) -> None:
        valid = await self.git.run(repository, "check-ref-format", "--branch", branch)
        if valid.returncode != 0:
            raise errors.InvalidArgument.field(
                "worktree.branch", f"{branch!r} is no valid branch name"
            )
        if await self._branch_exists(repository, branch):
            raise BranchExists(branch)

    async def _branch_exists(self, repository: Path, branch: str) -> bool:
        found = await self.git.run(
            repository, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}"
        )
        return found.returncode == 0

    async def _derive_branch(self, repository: Path, title: str) -> str:
        """`corral/<the title's words>`, or `corral/agent-<hex>`; a free one (`-2`, `-3`...)."""
        words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:_DERIVED_CHARS].strip("-")
        stem = _PREFIX + (words or f"agent-{self.new_suffix()}")
        for n in range(1, 100):
            branch = stem if n == 1 else f"{stem}-{n}"
            if not await self._branch_exists(repository, branch):
                return branch
        return f"{stem}-{self.new_suffix()}"

    def _free_path(self, repository: Path, branch: str) -> Path:
        parent = self._parent(repository)
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", branch).strip(".-") or "worktree"
        path = parent / slug
        n = 2
        while path.exists():  # a stat of our own directory: cheap, and under the lock
            path, n = parent / f"{slug}-{n}", n + 1
        return path

    def _parent(self, repository: Path) -> Path:
        if self.root is None:
            return repository.parent / f"{repository.name}.worktrees"
        tag = hashlib.sha256(str(repository).encode()).hexdigest()[:8]
        return self.root / f"{repository.name}-{tag}"

    async def _add(self, repository: Path, branch: str, path: Path, base_commit: str) -> None:
        """`git worktree add -b`; when it fails, whatever it left (the branch, the
        directory) goes again."""
        result = await self.git.run(
            repository, "worktree", "add", "--quiet", "-b", branch, str(path), base_commit
        )
        if result.returncode == 0:
            return
        await asyncio.to_thread(shutil.rmtree, path, True)
        await self.git.run(repository, "worktree", "prune")
        if await self._branch_exists(repository, branch):
            await self.git.run(repository, "branch", "-D", "--", branch)
        raise GitFailed(result.stderr.strip() or "git worktree add failed", ("worktree", "add"))


def worktrees_for(root: Path | None, state_dir: Path | None, program: str) -> Worktrees:
    """The daemon's: under `root`, else the state directory's `worktrees/`, else beside each
    repository."""
    if root is None and state_dir is not None:
        root = state_dir / "worktrees"
    return Worktrees(Git(program), root=root)


def check_branch_name(branch: str) -> None:
    """What we refuse before asking git: names git would take as options, and long ones."""
    if len(branch) > MAX_BRANCH_CHARS:
        raise errors.InvalidArgument.field(
            "worktree.branch", f"at most {MAX_BRANCH_CHARS} characters"
        )
    if branch.startswith("-"):
        raise errors.InvalidArgument.field("worktree.branch", "must not start with '-'")


def count_status_entries(porcelain_z: str) -> int:
    """Entries of `git status --porcelain=v1 -z`: a rename or copy names two paths."""
    fields = porcelain_z.split("\0")
    count = i = 0
    while i < len(fields):
        entry = fields[i]
        if len(entry) < 4:
            i += 1
            continue
        count += 1
        i += 2 if entry[0] in "RC" else 1
    return count

"""Worktrees per agent through the wire, on real git repositories: CreateAgent{worktree} makes a
branch and a worktree the agent runs in; bad input is a clear status that makes nothing;
ArchiveAgent removes a clean worktree and keeps a dirty one (saying so); DeleteWorkspace
removes one on request, refusing a dirty one unless forced; branches are always kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import workspace_service_pb2 as ws_pb
from corral.v1 import workspace_service_pb2_grpc as ws_grpc
from corral_server.app import Config
from tests.support.client import Stubs, create_request, error_details
from tests.support.daemon import DaemonThread
from tests.support.fakes import FakeProvider
from tests.support.git_repos import branches, commit_all, git, make_repo, worktree_paths


def exists(path: Path | str) -> bool:
    return Path(path).exists()


def worktree(branch: str = "", base: str = "") -> svc_pb.WorktreeRequest:
    return svc_pb.WorktreeRequest(branch=branch, base=base)


async def count_agents(stubs: Stubs) -> int:
    reply = await stubs.agents.ListAgents(svc_pb.ListAgentsRequest(include_archived=True))
    return len(reply.agents)


async def test_create_makes_a_branch_and_a_worktree_the_agent_runs_in(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "hi\n", "src/app.py": "x = 1\n"})
    head = git(repo, "rev-parse", "HEAD").strip()
    stubs = Stubs.of(aio_channel)
    request = create_request(str(repo / "src"), worktree=worktree("feature/login"))
    agent = (await stubs.agents.CreateAgent(request)).agent
    ws = agent.workspace
    assert (ws.repository, ws.branch, ws.base, ws.base_commit) == (
        str(repo),
        "feature/login",
        "HEAD",
        head,
    )
    # Beside the repository (this daemon has no state directory), the branch's '/' as '-'.
    assert ws.path == str(tmp_path / "repo.worktrees" / "feature-login")
    assert agent.cwd == str(Path(ws.path) / "src")  # the same subdirectory, in the worktree
    assert (Path(ws.path) / "src" / "app.py").read_text() == "x = 1\n"
    assert git(ws.path, "branch", "--show-current").strip() == "feature/login"
    assert ws.path in worktree_paths(repo)
    assert "feature/login" in branches(repo)
    got = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent.id))).agent
    assert got.workspace == ws


async def test_the_branch_is_derived_from_the_title_and_starts_at_the_base(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "later.txt").write_text("later\n")
    commit_all(repo, "later")
    stubs = Stubs.of(aio_channel)
    made = []
    for _ in range(2):
        request = create_request(
            str(repo), title="Fix the Login bug!", worktree=worktree(base=first)
        )
        made.append((await stubs.agents.CreateAgent(request)).agent.workspace)
    assert [w.branch for w in made] == ["corral/fix-the-login-bug", "corral/fix-the-login-bug-2"]
    assert all(w.base == first and w.base_commit == first for w in made)
    assert not (Path(made[0].path) / "later.txt").exists()  # checked out at the base
    untitled = (
        await stubs.agents.CreateAgent(create_request(str(repo), worktree=worktree()))
    ).agent
    assert untitled.workspace.branch.startswith("corral/agent-")


@pytest.mark.parametrize(
    ("case", "code", "reason", "field"),
    [
        ("branch exists", grpc.StatusCode.ALREADY_EXISTS, "BRANCH_EXISTS", "worktree.branch"),
        ("bad base", grpc.StatusCode.INVALID_ARGUMENT, "REVISION_NOT_FOUND", "worktree.base"),
        ("bad name", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "worktree.branch"),
        ("option name", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "worktree.branch"),
        ("not a repository", grpc.StatusCode.FAILED_PRECONDITION, "NOT_A_REPOSITORY", "cwd"),
    ],
)
async def test_bad_worktree_requests_are_clear_statuses_that_make_nothing(
    aio_channel: grpc.aio.Channel,
    tmp_path: Path,
    case: str,
    code: grpc.StatusCode,
    reason: str,
    field: str,
) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "branch", "taken")
    plain = tmp_path / "plain"
    plain.mkdir()
    cwd, request = {
        "branch exists": (repo, worktree("taken")),
        "bad base": (repo, worktree("new", base="no-such-ref")),
        "bad name": (repo, worktree("a..b")),
        "option name": (repo, worktree("--force")),
        "not a repository": (plain, worktree("new")),
    }[case]
    stubs = Stubs.of(aio_channel)
    before = await count_agents(stubs)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await stubs.agents.CreateAgent(create_request(str(cwd), worktree=request))
    details = error_details(failed.value)
    assert (details.code, details.reason) == (code, reason)
    assert field in details.fields
    assert await count_agents(stubs) == before
    assert branches(repo) == {"main", "taken"}
    assert worktree_paths(repo) == [str(repo)]
    assert not (tmp_path / "repo.worktrees").exists()
    assert not (tmp_path / "plain.worktrees").exists()


async def test_archive_removes_a_clean_worktree_and_keeps_a_dirty_one(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    stubs = Stubs.of(aio_channel)
    clean = (
        await stubs.agents.CreateAgent(create_request(str(repo), worktree=worktree("clean")))
    ).agent
    dirty = (
        await stubs.agents.CreateAgent(create_request(str(repo), worktree=worktree("dirty")))
    ).agent
    (Path(dirty.workspace.path) / "README.md").write_text("changed\n")
    (Path(dirty.workspace.path) / "new.txt").write_text("new\n")
    answers = {}
    for agent in (clean, dirty):
        reply = await stubs.agents.ArchiveAgent(svc_pb.ArchiveAgentRequest(agent_id=agent.id))
        assert list(reply.archived_agent_ids) == [agent.id]
        (answers[agent.id],) = reply.workspaces
    assert answers[clean.id].removed and not exists(clean.workspace.path)
    kept = answers[dirty.id]
    assert (kept.removed, kept.kept_reason, kept.path) == (
        False,
        "2 uncommitted changes",
        dirty.workspace.path,
    )
    assert (Path(dirty.workspace.path) / "new.txt").read_text() == "new\n"
    assert {"clean", "dirty"} <= branches(repo)  # archive keeps every branch


async def test_delete_workspace_refuses_a_dirty_one_unless_forced(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    stubs = Stubs.of(aio_channel)
    workspaces = ws_grpc.WorkspaceServiceStub(aio_channel)
    agent = (
        await stubs.agents.CreateAgent(create_request(str(repo), worktree=worktree("work")))
    ).agent
    path = Path(agent.workspace.path)
    delete = ws_pb.DeleteWorkspaceRequest(agent_id=agent.id)
    with pytest.raises(grpc.aio.AioRpcError) as live:
        await workspaces.DeleteWorkspace(delete)
    assert error_details(live.value).reason == "AGENT_NOT_CLOSED"
    await stubs.agents.CloseAgent(svc_pb.CloseAgentRequest(agent_id=agent.id))
    (path / "scratch.txt").write_text("unsaved\n")
    with pytest.raises(grpc.aio.AioRpcError) as dirty:
        await workspaces.DeleteWorkspace(delete)
    details = error_details(dirty.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "WORKSPACE_DIRTY",
    )
    assert (path / "scratch.txt").exists()
    forced = await workspaces.DeleteWorkspace(
        ws_pb.DeleteWorkspaceRequest(agent_id=agent.id, force=True)
    )
    assert forced.removed and forced.workspace.path == str(path) and not exists(path)
    assert "work" in branches(repo) and worktree_paths(repo) == [str(repo)]
    again = await workspaces.DeleteWorkspace(delete)
    assert not again.removed


async def test_delete_workspace_of_an_agent_without_one_is_not_found(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    assert not agent.HasField("workspace")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await ws_grpc.WorkspaceServiceStub(aio_channel).DeleteWorkspace(
            ws_pb.DeleteWorkspaceRequest(agent_id=agent.id)
        )
    details = error_details(failed.value)
    assert (details.code, details.reason) == (grpc.StatusCode.NOT_FOUND, "WORKSPACE_NOT_FOUND")


@pytest.fixture
def broken_daemon(tmp_path: Path) -> Iterator[tuple[DaemonThread, FakeProvider]]:
    """A daemon whose `fake` provider fails to open sessions and whose git is missing."""
    provider = FakeProvider()
    config = Config(
        extra_providers={"fake": provider},
        worktrees_dir=tmp_path / "managed",
        git_program=str(tmp_path / "no-git"),
    )
    daemon = DaemonThread(config).start()
    yield daemon, provider
    daemon.stop()


async def test_a_create_that_fails_after_its_worktree_takes_it_back(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    provider = FakeProvider()
    provider.create_error = RuntimeError("no session today")
    daemon = DaemonThread(
        Config(extra_providers={"fake": provider}, worktrees_dir=tmp_path / "managed")
    ).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            request = create_request(str(repo), provider="fake", worktree=worktree("doomed"))
            with pytest.raises(grpc.aio.AioRpcError):
                await Stubs.of(channel).agents.CreateAgent(request)
            assert await count_agents(Stubs.of(channel)) == 0
        # The provider was asked to run in the worktree, under the managed directory.
        (config,) = provider.configs
        assert config.cwd.startswith(str(tmp_path / "managed" / "repo-"))
        assert branches(repo) == {"main"} and worktree_paths(repo) == [str(repo)]
        assert not exists(config.cwd)
    finally:
        daemon.stop()


async def test_a_missing_git_is_a_clear_status(
    broken_daemon: tuple[DaemonThread, Any], tmp_path: Path
) -> None:
    daemon, _ = broken_daemon
    repo = make_repo(tmp_path / "repo")
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await Stubs.of(channel).agents.CreateAgent(
                create_request(str(repo), worktree=worktree("x"))
            )
        details = error_details(failed.value)
        assert (details.code, details.reason) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "GIT_UNAVAILABLE",
        )
        assert await count_agents(Stubs.of(channel)) == 0

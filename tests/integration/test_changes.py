"""GetChanges and changes_updated through the wire, on real git repositories: the files an agent's
workspace changed (added, modified, deleted, renamed, binary, untracked), since its base, its
last turn or a commit; diffs on request, clipped and paged within bounds; bad input is a clear
status."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import workspace_service_pb2 as ws_pb
from corral.v1 import workspace_service_pb2_grpc as ws_grpc
from tests.support.client import Stubs, create_request, error_details, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.git_repos import commit_all, git, make_repo
from tests.support.watch import Watch, is_

KIND = ws_pb.ChangeKind


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def remove(path: Path) -> None:
    path.unlink()


async def changes(
    channel: grpc.aio.Channel, agent_id: str, **kw: object
) -> ws_pb.GetChangesResponse:
    request = ws_pb.GetChangesRequest(agent_id=agent_id, **kw)  # type: ignore[arg-type]
    return await ws_grpc.WorkspaceServiceStub(channel).GetChanges(request)


async def worktree_agent(
    channel: grpc.aio.Channel, repo: Path, branch: str
) -> svc_pb.CreateAgentResponse:
    request = create_request(str(repo), worktree=svc_pb.WorktreeRequest(branch=branch))
    return await Stubs.of(channel).agents.CreateAgent(request)


async def test_every_kind_of_change_since_the_base_with_diffs_on_request(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    files = {"README.md": "one\ntwo\n", "gone.txt": "bye\n", "old.txt": "moved text\n" * 20}
    repo = make_repo(tmp_path / "repo", files)
    agent = (await worktree_agent(aio_channel, repo, "work")).agent
    root = Path(agent.workspace.path)
    await asyncio.to_thread(write, root / "README.md", "one\n2\nthree\n")
    await asyncio.to_thread(write, root / "src" / "new.py", "a = 1\nb = 2\n")  # untracked
    await asyncio.to_thread(write, root / "logo.png", b"\x89PNG\x00\x01\x02")
    await asyncio.to_thread(remove, root / "gone.txt")
    await asyncio.to_thread((root / "old.txt").rename, root / "new.txt")
    reply = await changes(aio_channel, agent.id, diff_paths=["README.md", "nothing.txt"])
    got = {
        f.path: (f.kind, f.old_path, f.binary, f.lines_added, f.lines_removed) for f in reply.files
    }
    assert got == {
        "README.md": (KIND.CHANGE_KIND_MODIFIED, "", False, 2, 1),
        "gone.txt": (KIND.CHANGE_KIND_DELETED, "", False, 0, 1),
        "logo.png": (KIND.CHANGE_KIND_ADDED, "", True, 0, 0),
        "new.txt": (KIND.CHANGE_KIND_RENAMED, "old.txt", False, 0, 0),
        "src/new.py": (KIND.CHANGE_KIND_ADDED, "", False, 2, 0),
    }
    assert [f.path for f in reply.files] == sorted(got)  # by path
    assert (reply.total_files, reply.lines_added, reply.lines_removed) == (5, 4, 2)
    assert reply.since_tree == agent.workspace.base_commit and not reply.next_page_token
    readme, nothing = reply.diffs
    assert readme.path == "README.md" and not readme.clipped
    assert "-two\n+2\n+three\n" in readme.diff and readme.diff.startswith("diff --git")
    assert (nothing.path, nothing.diff) == ("nothing.txt", "")
    # Nothing was touched: the user's index and HEAD are as they were.
    assert git(root, "diff", "--cached", "--name-only") == ""  # nothing staged
    assert git(root, "rev-parse", "HEAD").strip() == agent.workspace.base_commit


async def test_pages_and_clipped_diffs_stay_within_their_bounds(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    agent = (await worktree_agent(aio_channel, repo, "many")).agent
    root = Path(agent.workspace.path)
    for n in range(5):
        await asyncio.to_thread(write, root / f"f{n}.txt", f"line {n}\n" * 2000)
    paths: list[str] = []
    token = ""
    while True:
        page = await changes(aio_channel, agent.id, page_size=2, page_token=token)
        assert len(page.files) <= 2 and page.total_files == 5
        paths += [f.path for f in page.files]
        token = page.next_page_token
        if not token:
            break
    assert paths == [f"f{n}.txt" for n in range(5)]
    reply = await changes(aio_channel, agent.id, diff_paths=["f1.txt"], max_diff_bytes=1024)
    (diff,) = reply.diffs
    assert diff.clipped and len(diff.diff.encode()) <= 1024 and diff.diff.endswith("\n")


async def test_changes_updated_after_each_turn_and_changes_since_the_last_turn(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    stubs = Stubs.of(aio_channel)
    agent = (await worktree_agent(aio_channel, repo, "turns")).agent
    root = Path(agent.workspace.path)
    await asyncio.to_thread(write, root / "before.txt", "made before any turn\n")
    watch = await Watch(stubs, agent.id).synced()
    await stubs.turns.SendPrompt(prompt_request(agent.id, "/reply one"))
    first = await watch.until(is_("changes_updated"))
    assert (first.changes_updated.agent_id, first.changes_updated.files) == (agent.id, 1)
    # The second turn changes a file while it runs.
    await stubs.turns.SendPrompt(prompt_request(agent.id, "/sleep 4321"))
    await asyncio.to_thread(daemon.clock.wait_for_timer, 4321)
    await asyncio.to_thread(write, root / "during.txt", "x\ny\n")
    await daemon.advance_async(4321)
    second = await watch.until(is_("changes_updated"))
    assert (second.changes_updated.files, second.changes_updated.lines_added) == (2, 3)
    last = await changes(aio_channel, agent.id, since=ws_pb.CHANGES_SINCE_LAST_TURN)
    assert [f.path for f in last.files] == ["during.txt"]
    base = await changes(aio_channel, agent.id, since=ws_pb.CHANGES_SINCE_BASE)
    assert [f.path for f in base.files] == ["before.txt", "during.txt"]
    watch.cancel()


async def test_an_agent_without_a_worktree_sees_its_repository_since_head_or_a_commit(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    first = git(repo, "rev-parse", "HEAD").strip()
    await asyncio.to_thread(write, repo / "b.txt", "b\n")
    await asyncio.to_thread(commit_all, repo, "b")
    await asyncio.to_thread(write, repo / "c.txt", "c\n")
    stubs = Stubs.of(aio_channel)
    agent = (await stubs.agents.CreateAgent(create_request(str(repo)))).agent
    since_head = await changes(aio_channel, agent.id)
    assert [f.path for f in since_head.files] == ["c.txt"]
    since_first = await changes(
        aio_channel, agent.id, since=ws_pb.CHANGES_SINCE_COMMIT, commit=first
    )
    assert [f.path for f in since_first.files] == ["b.txt", "c.txt"]


INVALID, PRECONDITION = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION
BAD_QUERIES: dict[str, tuple[grpc.StatusCode, str, str, dict[str, Any]]] = {
    "bad commit": (
        INVALID,
        "REVISION_NOT_FOUND",
        "commit",
        {"since": ws_pb.CHANGES_SINCE_COMMIT, "commit": "nope"},
    ),
    "no commit": (INVALID, "INVALID_ARGUMENT", "commit", {"since": ws_pb.CHANGES_SINCE_COMMIT}),
    "outside": (INVALID, "INVALID_ARGUMENT", "diff_paths", {"diff_paths": ["../secret"]}),
    "big page": (INVALID, "INVALID_ARGUMENT", "page_size", {"page_size": 5000}),
    "bad token": (INVALID, "INVALID_ARGUMENT", "page_token", {"page_token": "x"}),
    "no turn": (PRECONDITION, "NO_TURN_RECORDED", "", {"since": ws_pb.CHANGES_SINCE_LAST_TURN}),
    "not a repository": (PRECONDITION, "NOT_A_REPOSITORY", "cwd", {}),
}


@pytest.mark.parametrize("case", BAD_QUERIES)
async def test_bad_change_queries_are_clear_statuses(
    aio_channel: grpc.aio.Channel, tmp_path: Path, case: str
) -> None:
    code, reason, field, query = BAD_QUERIES[case]
    repo = make_repo(tmp_path / "repo")
    plain = tmp_path / "plain"
    plain.mkdir()
    cwd = plain if case == "not a repository" else repo
    agent = (await Stubs.of(aio_channel).agents.CreateAgent(create_request(str(cwd)))).agent
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await changes(aio_channel, agent.id, **query)
    details = error_details(failed.value)
    assert (details.code, details.reason) == (code, reason)
    assert not field or field in details.fields

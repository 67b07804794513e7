"""`corral diff AGENT [--stat] [FILE]`: what an agent changed in its workspace (GetChanges);
`corral worktree rm AGENT [--force]`: an agent's git worktree (WorkspaceService).

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse

from corral.v1 import workspace_service_pb2 as ws_pb
from corral.v1 import workspace_service_pb2_grpc as ws_grpc
from corral_cli import failure
from corral_cli.client import Client
from corral_cli.grammar import Parents, Parser, Subparsers, command
from corral_cli.render import Console

_SINCE = {"base": ws_pb.CHANGES_SINCE_BASE, "last-turn": ws_pb.CHANGES_SINCE_LAST_TURN}
_LETTER = {
    ws_pb.CHANGE_KIND_ADDED: "A",
    ws_pb.CHANGE_KIND_MODIFIED: "M",
    ws_pb.CHANGE_KIND_DELETED: "D",
    ws_pb.CHANGE_KIND_RENAMED: "R",
}
_PAGE = 1000
_DIFFS_PER_CALL = 16  # GetChanges' diff_paths limit


def add_commands(sub: Subparsers, parents: Parents) -> None:
    diff = command(
        sub,
        parents,
        "diff",
        "Show what an agent changed in its workspace (uncommitted and untracked files too).",
        "Prints the unified diff of every changed file, or of FILE (a path from the repository's\n"
        "top level); --stat prints one line per file instead: A/M/D/R, +added -removed (bin for\n"
        "a binary file), the path, then the totals. --since: base (the worktree's base, or HEAD\n"
        "for an agent without one; the default), last-turn, or a commit. A cwd in no git\n"
        "repository is NOT_A_REPOSITORY (exit 2).",
    )
    diff.add_argument("agent", help="an agent id, or any unique prefix of one")
    diff.add_argument("file", nargs="?", default=None, help="only this file's diff")
    diff.add_argument("--stat", action="store_true", help="one line per file, no diffs")
    diff.add_argument(
        "--since",
        default="base",
        metavar="base|last-turn|COMMIT",
        help="what to compare with (default %(default)s)",
    )
    diff.set_defaults(func=show_diff)
    actions = command_group(
        sub,
        "worktree",
        "An agent's git worktree (made by `run --worktree`).",
        "`corral worktree rm AGENT` removes a closed agent's worktree directory; its branch is\n"
        "kept. A worktree with uncommitted changes is refused (WORKSPACE_DIRTY, exit 2) unless\n"
        "--force, which loses them.",
    )
    rm = command(
        actions,
        parents,
        "rm",
        "Remove a closed agent's worktree (its branch stays).",
        "Prints `removed PATH`, or `already gone: PATH`.",
    )
    rm.add_argument("agent", help="an agent id, or any unique prefix of one")
    rm.add_argument("--force", action="store_true", help="even with uncommitted changes")
    rm.set_defaults(func=remove)


def remove(client: Client, console: Console, args: argparse.Namespace) -> int:
    stub = ws_grpc.WorkspaceServiceStub(client.channel)
    reply = stub.DeleteWorkspace(
        ws_pb.DeleteWorkspaceRequest(agent_id=args.agent, force=args.force),
        timeout=client.timeout_s,
    )
    if console.json:
        console.message(reply)
    elif reply.removed:
        console.line(f"removed {reply.workspace.path} (branch {reply.workspace.branch} kept)")
    else:
        console.line(f"already gone: {reply.workspace.path}")
    return failure.EXIT_OK


def command_group(sub: Subparsers, name: str, summary: str, outcomes: str) -> Subparsers:
    """A command whose first argument is an action (`corral NAME ACTION ...`)."""
    group = command(sub, [], name, summary, outcomes)
    return group.add_subparsers(
        dest=f"{name}_action", required=True, metavar="ACTION", parser_class=Parser
    )


def _request(args: argparse.Namespace, **kw: object) -> ws_pb.GetChangesRequest:
    since = _SINCE.get(args.since, ws_pb.CHANGES_SINCE_COMMIT)
    commit = args.since if since == ws_pb.CHANGES_SINCE_COMMIT else ""
    return ws_pb.GetChangesRequest(agent_id=args.agent, since=since, commit=commit, **kw)  # type: ignore[arg-type]


def show_diff(client: Client, console: Console, args: argparse.Namespace) -> int:
    stub = ws_grpc.WorkspaceServiceStub(client.channel)
    if args.file is not None:
        reply = stub.GetChanges(_request(args, diff_paths=[args.file]), timeout=client.timeout_s)
        _print_diffs(console, reply)
        return failure.EXIT_OK
    files: list[ws_pb.ChangedFile] = []
    token = ""
    while True:
        page = stub.GetChanges(
            _request(args, page_size=_PAGE, page_token=token), timeout=client.timeout_s
        )
        files += page.files
        token = page.next_page_token
        if not token:
            break
    if args.stat:
        _print_stat(console, files, page)
        return failure.EXIT_OK
    paths = [f.path for f in files]
    for start in range(0, len(paths), _DIFFS_PER_CALL):
        batch = paths[start : start + _DIFFS_PER_CALL]
        reply = stub.GetChanges(
            _request(args, diff_paths=batch, page_size=1), timeout=client.timeout_s
        )
        _print_diffs(console, reply)
    return failure.EXIT_OK


def _print_stat(
    console: Console, files: list[ws_pb.ChangedFile], last: ws_pb.GetChangesResponse
) -> None:
    if console.json:
        for f in files:
            console.message(f)
        return
    for f in files:
        counts = "bin" if f.binary else f"+{f.lines_added} -{f.lines_removed}"
        name = f"{f.old_path} -> {f.path}" if f.old_path else f.path
        console.line(f"{_LETTER.get(f.kind, '?')}  {counts:>12}  {name}")
    console.line(
        f"{last.total_files} files changed, +{last.lines_added} -{last.lines_removed}"
        f" (since {last.since_tree[:12]})"
    )


def _print_diffs(console: Console, reply: ws_pb.GetChangesResponse) -> None:
    for diff in reply.diffs:
        if console.json:
            console.message(diff)
            continue
        if diff.diff:  # git's text as it is: it ends with its own newline
            console.out.write(diff.diff)
            console.out.flush()
        if diff.clipped:
            console.note(f"(the diff of {diff.path} was cut: it is longer than 256 KiB)")
        if not diff.diff:
            console.note(f"{diff.path}: no change")

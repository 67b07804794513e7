"""The sub-agent commands (SubagentService): `corral spawn`, `corral runs`, `corral kill-run`.

`spawn --wait` subscribes to the requester's events before it spawns (a run's updates are
published to its requester), so the run's end cannot be missed, then prints the result.

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeAlias

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral.v1 import subagent_service_pb2_grpc as sub_grpc
from corral_cli import failure
from corral_cli.client import Client, load_access, open_channel, prompt_text, stop
from corral_cli.render import Console, local_time, one_line

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

CLEANUP = {"keep": sub_pb.SUBAGENT_CLEANUP_KEEP, "delete": sub_pb.SUBAGENT_CLEANUP_DELETE}
_TASK_CHARS = 40  # of a task shown in the runs table


def add_commands(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    spawn_cmd = sub.add_parser(
        "spawn", parents=parents, help="spawn a sub-agent of AGENT on TASK (a run)"
    )
    spawn_cmd.add_argument("agent", help="the requester: an agent id, or a unique prefix")
    spawn_cmd.add_argument("task", nargs="+", metavar="TASK", help="task words; - = stdin")
    spawn_cmd.add_argument("--label", default="", help="a name for the run")
    spawn_cmd.add_argument("--cleanup", choices=tuple(CLEANUP), default="keep")
    spawn_cmd.add_argument("--provider", default="", help="default: the requester's")
    spawn_cmd.add_argument(
        "--run-timeout", type=int, default=0, metavar="S", help="end the run after S seconds"
    )
    spawn_cmd.add_argument(
        "--wait", action="store_true", help="wait for the run to end and print its result"
    )
    spawn_cmd.set_defaults(func=spawn)
    runs_cmd = sub.add_parser(
        "runs", parents=parents, help="list sub-agent runs (of AGENT as requester or controller)"
    )
    runs_cmd.add_argument("agent", nargs="?", default=None, help="default: every run")
    runs_cmd.add_argument(
        "--descendants", action="store_true", help="also every run below the agent"
    )
    runs_cmd.add_argument("--active", action="store_true", help="only runs not ended")
    runs_cmd.set_defaults(func=runs)
    kill_cmd = sub.add_parser("kill-run", parents=parents, help="kill a sub-agent run")
    kill_cmd.add_argument("run", help="a run id, or a unique prefix of one")
    kill_cmd.add_argument("--cascade", action="store_true", help="and every run below it")
    kill_cmd.set_defaults(func=kill_run)


@contextmanager
def _service(client: Client, args: argparse.Namespace) -> Iterator[sub_grpc.SubagentServiceStub]:
    """The SubagentService on a channel of its own, with the same access as the client's."""
    env_token = os.environ.get("CORRAL_TOKEN", "")
    access = load_access(args.token_file, env_token, args.tls_ca, args.tls_cert, args.tls_key)
    with open_channel(client.addr, access) as channel:
        yield sub_grpc.SubagentServiceStub(channel)


def spawn(client: Client, console: Console, args: argparse.Namespace) -> int:
    task = prompt_text(args.task)
    request = sub_svc_pb.SpawnSubagentRequest(
        requester_agent_id=args.agent,
        task=task,
        provider=args.provider,
        label=args.label,
        cleanup=CLEANUP[args.cleanup],
        run_timeout_s=args.run_timeout,
    )
    with _service(client, args) as service:
        if not args.wait:
            run = service.SpawnSubagent(request, timeout=client.timeout_s).run
            _print_run(console, run)
            return failure.EXIT_OK
        events = client.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[args.agent]))
        try:
            stream = iter(events)
            _until_synced(stream)
            run = service.SpawnSubagent(request, timeout=client.timeout_s).run
            _print_run(console, run)
            ended = _until_ended(stream, run.run_id)
        finally:
            stop(events)
    if console.json:
        console.message(ended)
    else:
        console.line(ended.result_text)
        console.note(f"run {ended.run_id} ended: {_outcome(ended)} ({ended.end_reason})")
    return failure.EXIT_OK if ended.outcome == sub_pb.SUBAGENT_OUTCOME_OK else failure.EXIT_FAILED


def _print_run(console: Console, run: sub_pb.SubagentRun) -> None:
    if console.json:
        console.message(run)
    else:
        console.note(f"run {run.run_id} child {run.child_agent_id}")


def _until_synced(stream: Iterator[Any]) -> None:
    for response in stream:
        if any(e.WhichOneof("payload") == "synced" for e in response.events):
            return


def _until_ended(stream: Iterator[Any], run_id: str) -> sub_pb.SubagentRun:
    for response in stream:
        for event in response.events:
            if event.WhichOneof("payload") != "subagent_run_updated":
                continue
            run: sub_pb.SubagentRun = event.subagent_run_updated.run
            if run.run_id == run_id and run.HasField("ended_at"):
                return run
    raise RuntimeError("the event stream ended before the run did")


def runs(client: Client, console: Console, args: argparse.Namespace) -> int:
    request = sub_svc_pb.ListSubagentRunsRequest(
        agent_id=args.agent or "", descendants=args.descendants, active_only=args.active
    )
    with _service(client, args) as service:
        listed = service.ListSubagentRuns(request, timeout=client.timeout_s)
    if console.json:
        for run in listed.runs:
            console.message(run)
    else:
        for line in run_table(listed.runs):
            console.line(line)
        if args.agent:
            console.note(
                f"{listed.active_descendants} active, {listed.pending_descendants} pending "
                "below the agent"
            )
    return failure.EXIT_OK


def kill_run(client: Client, console: Console, args: argparse.Namespace) -> int:
    with _service(client, args) as service:
        run_id = _resolve_run(service, client, args.run)
        if not run_id:
            console.note(f"error: {args.run!r} does not name exactly one run (`corral runs`)")
            return failure.EXIT_BAD_REQUEST
        request = sub_svc_pb.KillSubagentRunRequest(run_id=run_id, cascade=args.cascade)
        killed = service.KillSubagentRun(request, timeout=client.timeout_s)
    if console.json:
        console.message(killed)
    else:
        for killed_id in killed.killed_run_ids:
            console.line(killed_id)
        if not killed.killed_run_ids:
            console.note(f"run {run_id} had ended already")
    return failure.EXIT_OK


def _resolve_run(service: sub_grpc.SubagentServiceStub, client: Client, text: str) -> str:
    """The one run id that is `text` or starts with it; "" when several start with it."""
    every = sub_svc_pb.ListSubagentRunsRequest()
    listed = service.ListSubagentRuns(every, timeout=client.timeout_s)
    ids = [r.run_id for r in listed.runs]
    if text in ids or not text:
        return text
    matches = [run_id for run_id in ids if run_id.startswith(text)]
    if not matches:
        return text  # the daemon answers NOT_FOUND
    return matches[0] if len(matches) == 1 else ""


def run_table(listed: Sequence[sub_pb.SubagentRun]) -> list[str]:
    header = ("RUN", "CHILD", "REQUESTER", "STATE", "ANNOUNCE", "CREATED", "TASK")
    rows = [
        (
            r.run_id[:12],
            r.child_agent_id[:12] or "-",
            r.requester_agent_id[:12],
            _outcome(r),
            sub_pb.AnnounceState.Name(r.announce_state).removeprefix("ANNOUNCE_STATE_").lower(),
            local_time(r.created_at),
            r.label or one_line(r.task)[:_TASK_CHARS],
        )
        for r in listed
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _outcome(run: sub_pb.SubagentRun) -> str:
    if run.outcome == sub_pb.SUBAGENT_OUTCOME_UNSPECIFIED:
        return "running"
    return sub_pb.SubagentOutcome.Name(run.outcome).removeprefix("SUBAGENT_OUTCOME_").lower()

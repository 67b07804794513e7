"""The sub-agent commands (SubagentService): `corral spawn`, `corral runs`, `corral kill-run`.

`spawn --wait` subscribes to the requester's events before it spawns (a run's updates are
published to its requester), so the run's end cannot be missed, then prints the result.

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import Any

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral.v1 import subagent_service_pb2_grpc as sub_grpc
from corral_cli import failure
from corral_cli.client import Client, prompt_text, stop
from corral_cli.progress import waiting
from corral_cli.render import Console, local_time, one_line

CLEANUP = {"keep": sub_pb.SUBAGENT_CLEANUP_KEEP, "delete": sub_pb.SUBAGENT_CLEANUP_DELETE}
_TASK_CHARS = 40  # of a task shown in the runs table


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
    service = _service(client)
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
        with waiting(console, f"run {run.run_id} to end", _run_limit(args.run_timeout)):
            ended = _until_ended(stream, run.run_id)
    finally:
        stop(events)
    if ended is None:  # a drain, say: the run goes on in the daemon that comes back
        console.error(
            f"error: UNAVAILABLE: the daemon ended the event stream before run {run.run_id} ended"
        )
        console.error(f"hint: see how it ends with: corral runs {args.agent}")
        return failure.EXIT_FAILED
    if console.json:
        console.message(ended)
    else:
        console.line(ended.result_text)
        console.note(f"run {ended.run_id} ended: {_outcome(ended)} ({ended.end_reason})")
    return failure.EXIT_OK if ended.outcome == sub_pb.SUBAGENT_OUTCOME_OK else failure.EXIT_FAILED


def _service(client: Client) -> sub_grpc.SubagentServiceStub:
    return sub_grpc.SubagentServiceStub(client.channel)


def _run_limit(run_timeout_s: int) -> str:
    """How long a run may take, for the progress line."""
    limit = f"at most {run_timeout_s} s" if run_timeout_s else "no run timeout"
    return f"{limit}; a failed child ends it after the daemon's error grace, 15 s by default"


def _print_run(console: Console, run: sub_pb.SubagentRun) -> None:
    if console.json:
        console.message(run)
    else:
        console.note(f"run {run.run_id} child {run.child_agent_id}")


def _until_synced(stream: Iterator[Any]) -> None:
    for response in stream:
        if any(e.WhichOneof("payload") == "synced" for e in response.events):
            return


def _until_ended(stream: Iterator[Any], run_id: str) -> sub_pb.SubagentRun | None:
    """The run once it has ended; None if the stream ends first."""
    for response in stream:
        for event in response.events:
            if event.WhichOneof("payload") != "subagent_run_updated":
                continue
            run: sub_pb.SubagentRun = event.subagent_run_updated.run
            if run.run_id == run_id and run.HasField("ended_at"):
                return run
    return None


def runs(client: Client, console: Console, args: argparse.Namespace) -> int:
    request = sub_svc_pb.ListSubagentRunsRequest(
        agent_id=args.agent or "", descendants=args.descendants, active_only=args.active
    )
    listed = _service(client).ListSubagentRuns(request, timeout=client.timeout_s)
    if console.json:
        for run in listed.runs:
            console.message(run)
    else:
        for line in run_table(listed.runs):
            console.line(line)
        if args.agent:
            # The daemon's count of every run below the agent (its children's runs and
            # theirs), whatever --descendants lists: what the agent still waits on.
            console.note(
                f"runs below {args.agent}: {listed.active_descendants} not ended, "
                f"{listed.pending_descendants} not done (not ended, or not yet announced)"
            )
    return failure.EXIT_OK


def kill_run(client: Client, console: Console, args: argparse.Namespace) -> int:
    service = _service(client)
    run_id = _resolve_run(service, client, args.run)
    if not run_id:
        console.error(
            f"error: INVALID_ARGUMENT: {args.run!r} does not name exactly one run "
            "(`corral runs` lists them)"
        )
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
            r.run_id,
            r.child_agent_id or "-",
            r.requester_agent_id,
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

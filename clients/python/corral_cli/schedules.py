"""`corral schedule add | ls | pause | resume | rm`: prompts the daemon sends on its own
(ScheduleService).

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse
import os
import re

from google.protobuf.duration_pb2 import Duration

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import schedule_pb2 as sched_pb
from corral.v1 import schedule_service_pb2 as svc_pb
from corral.v1 import schedule_service_pb2_grpc as svc_grpc
from corral_cli import failure
from corral_cli.client import Client, parse_labels
from corral_cli.commands import IF_RUNNING
from corral_cli.grammar import Parents, Subparsers, command
from corral_cli.render import Console, local_time, one_line
from corral_cli.workspace import command_group

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PREVIEW = 40


def add_commands(sub: Subparsers, parents: Parents) -> None:
    actions = command_group(
        sub,
        "schedule",
        "Prompts the daemon sends on its own, on a cron expression or every interval.",
        "`schedule add` prints the new schedule's id and its first firing; `schedule ls` one\n"
        "line per schedule; `schedule pause|resume|rm ID` (an id or a unique prefix of one).\n"
        "A malformed cron expression or time zone is INVALID_ARGUMENT (exit 2): nothing is made.",
    )
    add = command(
        actions,
        parents,
        "add",
        "Schedule PROMPT for an agent (--agent) or for a new agent each time (--new).",
        "Prints `schedule ID, first at TIME`. Each firing is sent as `corral send` sends a prompt\n"
        "(--if-running says what happens while a turn runs: reject, the default, queue, steer\n"
        "or replace), or creates an agent like `corral run` with --provider, --cwd, --title.",
    )
    target = add.add_mutually_exclusive_group(required=True)
    target.add_argument("--agent", default=None, help="the agent to prompt (an id or a prefix)")
    target.add_argument("--new", action="store_true", help="create a new agent at each firing")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", default="", help="a cron expression, e.g. '0 9 * * 1-5'")
    when.add_argument("--every", default="", metavar="N[smhd]", help="an interval, e.g. 30m")
    add.add_argument("--tz", default="", help="the cron expression's IANA time zone (UTC)")
    add.add_argument("--if-running", choices=tuple(IF_RUNNING), default="reject", help="see above")
    add.add_argument("--provider", default="scripted", help="with --new (default %(default)s)")
    add.add_argument("--cwd", default=None, help="with --new: working directory (default: here)")
    add.add_argument("--title", default="", help="with --new: the agents' title")
    add.add_argument("--label", action="append", default=[], metavar="K=V", help="with --new")
    add.add_argument("prompt", nargs="+", metavar="PROMPT", help="prompt words, joined by spaces")
    add.set_defaults(func=add_schedule)
    ls = command(
        actions,
        parents,
        "ls",
        "List the schedules.",
        "One line each: id, next firing (or paused), timing, target, runs, last outcome, prompt.",
    )
    ls.add_argument("--agent", default=None, help="only this agent's")
    ls.set_defaults(func=list_schedules)
    for name, summary, func in (
        ("pause", "Pause a schedule: it fires no more until resumed.", pause),
        ("resume", "Resume a paused schedule, from now on (no catch-up).", resume),
        ("rm", "Delete a schedule.", remove),
    ):
        action = command(actions, parents, name, summary, "Prints what it did.")
        action.add_argument("schedule", help="a schedule id, or a unique prefix of one")
        action.set_defaults(func=func)


def _stub(client: Client) -> svc_grpc.ScheduleServiceStub:
    return svc_grpc.ScheduleServiceStub(client.channel)


def _interval(text: str) -> Duration:
    found = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if found is None:
        raise ValueError(f"--every {text!r}: a number and s, m, h or d (e.g. 30m)")
    return Duration(seconds=int(found.group(1)) * _UNITS_S[found.group(2)])


def add_schedule(client: Client, console: Console, args: argparse.Namespace) -> int:
    try:
        interval = _interval(args.every) if args.every else None
        labels = parse_labels(args.label)
    except ValueError as exc:
        console.error(f"error: INVALID_ARGUMENT: {exc}")
        return failure.EXIT_BAD_REQUEST
    request = svc_pb.CreateScheduleRequest(
        agent_id=args.agent or "",
        prompt=" ".join(args.prompt),
        cron=args.cron,
        if_running=IF_RUNNING[args.if_running],
        time_zone=args.tz,
    )
    if interval is not None:
        request.interval.CopyFrom(interval)
    if args.new:
        request.create.CopyFrom(
            agent_pb.CreateAgentRequest(
                provider=args.provider,
                cwd=os.path.abspath(args.cwd or os.getcwd()),
                title=args.title,
                labels=labels,
            )
        )
    made = _stub(client).CreateSchedule(request, timeout=client.timeout_s).schedule
    if console.json:
        console.message(made)
    else:
        console.line(f"schedule {made.id}, first at {local_time(made.next_run_at)}")
    return failure.EXIT_OK


def list_schedules(client: Client, console: Console, args: argparse.Namespace) -> int:
    stub = _stub(client)
    token = ""
    while True:
        page = stub.ListSchedules(
            svc_pb.ListSchedulesRequest(agent_id=args.agent or "", page_token=token),
            timeout=client.timeout_s,
        )
        for schedule in page.schedules:
            if console.json:
                console.message(schedule)
            else:
                console.line(_line(schedule))
        token = page.next_page_token
        if not token:
            break
    return failure.EXIT_OK


def _line(s: sched_pb.Schedule) -> str:
    when = f"every {s.interval.seconds}s" if s.HasField("interval") else f"cron {s.cron!r}"
    if s.cron and s.time_zone != "UTC":
        when += f" {s.time_zone}"
    target = f"agent {s.agent_id}" if s.agent_id else f"new {s.create.provider} agent"
    nxt = "paused" if s.paused else f"next {local_time(s.next_run_at)}"
    last = "never run"
    if s.HasField("last_run"):
        outcome = sched_pb.ScheduleOutcome.Name(s.last_run.outcome).removeprefix(
            "SCHEDULE_OUTCOME_"
        )
        last = f"last {outcome.lower()}" + (" (catch-up)" if s.last_run.catch_up else "")
    preview = one_line(s.prompt)[:_PREVIEW]
    return f"{s.id}  {nxt}  {when}  {target}  {s.run_count} runs, {last}  {preview}"


def _resolve(client: Client, prefix: str) -> str:
    """The schedule id a unique prefix names; the prefix itself otherwise (the daemon's
    SCHEDULE_NOT_FOUND then says so)."""
    ids: list[str] = []
    token = ""
    while True:
        page = _stub(client).ListSchedules(
            svc_pb.ListSchedulesRequest(page_token=token), timeout=client.timeout_s
        )
        ids += [s.id for s in page.schedules if s.id.startswith(prefix)]
        token = page.next_page_token
        if not token:
            break
    return ids[0] if len(ids) == 1 else prefix


def pause(client: Client, console: Console, args: argparse.Namespace) -> int:
    return _set_paused(client, console, args, True)


def resume(client: Client, console: Console, args: argparse.Namespace) -> int:
    return _set_paused(client, console, args, False)


def _set_paused(client: Client, console: Console, args: argparse.Namespace, paused: bool) -> int:
    request = svc_pb.PauseScheduleRequest(
        schedule_id=_resolve(client, args.schedule), paused=paused
    )
    changed = _stub(client).PauseSchedule(request, timeout=client.timeout_s).schedule
    if console.json:
        console.message(changed)
    elif paused:
        console.line(f"paused {changed.id}")
    else:
        console.line(f"resumed {changed.id}, next at {local_time(changed.next_run_at)}")
    return failure.EXIT_OK


def remove(client: Client, console: Console, args: argparse.Namespace) -> int:
    schedule_id = _resolve(client, args.schedule)
    _stub(client).DeleteSchedule(
        svc_pb.DeleteScheduleRequest(schedule_id=schedule_id), timeout=client.timeout_s
    )
    console.line(f"deleted {schedule_id}")
    return failure.EXIT_OK

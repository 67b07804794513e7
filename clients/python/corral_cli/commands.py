"""The one-shot commands: run, send, ls, cancel, wait, close, reload, permit, archive,
rewind, queued. Each takes the connected client, the
console and the parsed arguments, and returns the exit code; RPC errors propagate to main.

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse
import os
import shutil

from corral.v1 import agent_pb2 as agent_types_pb
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_cli import failure
from corral_cli.client import Client, parse_labels, prompt_content
from corral_cli.first_turn import follow_first_turn, head_revision
from corral_cli.progress import waiting
from corral_cli.render import Console, agent_table, local_time, queued_line, state_label
from corral_cli.turn import cancel_outcome, cancel_wait, stream_turn

IF_RUNNING = {
    "reject": turn_pb.IF_RUNNING_REJECT,
    "queue": turn_pb.IF_RUNNING_QUEUE,
    "steer": turn_pb.IF_RUNNING_STEER,
    "replace": turn_pb.IF_RUNNING_REPLACE,
}
_LIST_PAGE_SIZE = 500


def run(client: Client, console: Console, args: argparse.Namespace) -> int:
    """CreateAgent with the prompt as its initial prompt (an invalid prompt creates nothing),
    then follow that first turn (first_turn.py says how no event is missed)."""
    try:
        labels = parse_labels(args.label)
    except ValueError as exc:
        console.error(f"error: INVALID_ARGUMENT: {exc} (no agent created)")
        return failure.EXIT_BAD_REQUEST
    content = prompt_content(args.prompt)  # read stdin (`-`) before creating anything
    if not content[0].text.strip():
        console.error("error: INVALID_ARGUMENT: the prompt is empty (no agent created)")
        return failure.EXIT_BAD_REQUEST
    after_revision = head_revision(client)
    request = agent_pb.CreateAgentRequest(
        provider=args.provider,
        cwd=os.path.abspath(args.cwd or os.getcwd()),
        model=args.model,
        mode=args.mode,
        title=args.title,
        labels=labels,
        initial_prompt=content,
    )
    if args.worktree is not None:
        request.worktree.CopyFrom(agent_pb.WorktreeRequest(branch=args.worktree, base=args.base))
    # A real agent's session can take a while to start (the daemon allows it 60 s).
    with waiting(console, f"the {args.provider} session to start", "up to 60 s"):
        created = client.agents.CreateAgent(request, timeout=client.timeout_s)
    if console.json:
        console.message(created)
    console.note(f"agent {created.agent.id}")
    if created.agent.HasField("workspace"):
        ws = created.agent.workspace
        console.note(f"worktree {ws.path} on branch {ws.branch} from {ws.base}")
    return follow_first_turn(client, console, created.agent.id, created.turn_id, after_revision)


def send(client: Client, console: Console, args: argparse.Namespace) -> int:
    """SendPrompt (or, with --follow, StreamTurn) to an existing agent."""
    content = prompt_content(args.prompt)
    if_running = IF_RUNNING[args.if_running]
    if args.follow:
        request = turn_pb.StreamTurnRequest(
            agent_id=args.agent, content=content, if_running=if_running
        )
        return stream_turn(client, console, request)
    resp = client.turns.SendPrompt(
        turn_pb.SendPromptRequest(agent_id=args.agent, content=content, if_running=if_running),
        timeout=client.timeout_s,
    )
    if console.json:
        console.message(resp)
    else:
        found = turn_pb.PromptDisposition.DESCRIPTOR.values_by_number.get(resp.disposition)
        disposition = found.name.removeprefix("PROMPT_DISPOSITION_").lower() if found else "?"
        if resp.turn_id:
            console.line(f"{disposition} {resp.turn_id}")
        else:  # queued: the turn starts later; the message id removes it before then
            console.line(f"{disposition} as {resp.client_message_id}")
    return failure.EXIT_OK


def ls(client: Client, console: Console, args: argparse.Namespace) -> int:
    """ListAgents, every page."""
    request = agent_pb.ListAgentsRequest(
        page_size=_LIST_PAGE_SIZE,
        label_selector=args.selector,
        include_archived=args.all,
        parent_agent_id=args.parent,
    )
    agents: list[agent_types_pb.Agent] = []
    while True:
        page = client.agents.ListAgents(request, timeout=client.timeout_s)
        agents.extend(page.agents)
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    if console.json:
        for agent in agents:
            console.message(agent)
    elif agents:
        for line in agent_table(agents, shutil.get_terminal_size().columns):
            console.line(line)
    else:
        console.note("no agents")
    return failure.EXIT_OK


def cancel(client: Client, console: Console, args: argparse.Namespace) -> int:
    """CancelTurn: 0 for not_running and settled, 3 when the provider refused."""
    with cancel_wait(console, args.agent):
        resp = client.turns.CancelTurn(
            turn_pb.CancelTurnRequest(agent_id=args.agent), timeout=client.timeout_s
        )
    if console.json:
        console.message(resp)
    else:
        console.line(f"{cancel_outcome(resp.outcome)} (agent {state_label(resp.agent)})")
    if resp.outcome == turn_pb.CANCEL_OUTCOME_REFUSED:
        return failure.EXIT_REFUSED
    return failure.EXIT_OK


_WAIT_EXIT = {
    turn_pb.WAIT_STATUS_IDLE: ("idle", failure.EXIT_OK),
    turn_pb.WAIT_STATUS_ERROR: ("error", failure.EXIT_FAILED),
    turn_pb.WAIT_STATUS_PERMISSION: ("permission", failure.EXIT_OK),
    turn_pb.WAIT_STATUS_TIMEOUT: ("timeout", failure.EXIT_TIMEOUT),
}


def wait(client: Client, console: Console, args: argparse.Namespace) -> int:
    """WaitForIdle: 0 idle (or waiting on a permission), 1 errored, 4 timed out."""
    request = turn_pb.WaitForIdleRequest(agent_id=args.agent)
    if args.timeout_s is not None:
        request.timeout.FromNanoseconds(int(args.timeout_s * 1e9))
    # The RPC's own deadline: the wait plus the usual slack (None waits as long as it takes).
    deadline = None if args.timeout_s is None else args.timeout_s + client.timeout_s
    limit = (
        "no time limit; Ctrl-C stops waiting" if args.timeout_s is None else f"{args.timeout_s:g} s"
    )
    with waiting(console, f"agent {args.agent} to be idle", limit):
        resp = client.turns.WaitForIdle(request, timeout=deadline)
    label, code = _WAIT_EXIT.get(resp.status, ("unknown", failure.EXIT_FAILED))
    if console.json:
        console.message(resp)
    else:
        console.line(_waited(label, resp.agent))
    return code


def _waited(label: str, agent: agent_types_pb.Agent) -> str:
    """What `wait` found: `idle`, `errored: why`, `permission NAME (id ID)`, or how a timeout
    left the agent."""
    match label:
        case "idle":
            return "idle"
        case "error":
            return state_label(agent)
        case "permission" if agent.pending_permissions:
            first = agent.pending_permissions[0]
            more = len(agent.pending_permissions) - 1
            return f"permission {first.name} (id {first.id})" + (
                f" and {more} more" if more else ""
            )
        case _:
            return f"{label} (agent {state_label(agent)})"


def close(client: Client, console: Console, args: argparse.Namespace) -> int:
    """CloseAgent: print the closed snapshot's state."""
    agent = client.agents.CloseAgent(
        agent_pb.CloseAgentRequest(agent_id=args.agent), timeout=client.timeout_s
    ).agent
    if console.json:
        console.message(agent)
    elif agent.lifecycle.HasField("closed"):
        console.line(f"{agent.id} closed at {local_time(agent.lifecycle.closed.closed_at)}")
    else:
        console.line(f"{agent.id} {state_label(agent)}")
    return failure.EXIT_OK


def reload(client: Client, console: Console, args: argparse.Namespace) -> int:
    """ReloadAgent: the agent's new session and timeline epoch."""
    request = agent_pb.ReloadAgentRequest(agent_id=args.agent, rehydrate_from_disk=args.rehydrate)
    agent = client.agents.ReloadAgent(request, timeout=client.timeout_s).agent
    if console.json:
        console.message(agent)
    else:
        console.line(
            f"{agent.id} reloaded: {state_label(agent)}, session {agent.provider_session_id}, "
            f"epoch {agent.timeline.epoch}"
        )
    return failure.EXIT_OK


def import_agent(client: Client, console: Console, args: argparse.Namespace) -> int:
    """ImportAgent: a new agent holding an existing provider session's conversation."""
    request = agent_pb.ImportAgentRequest(
        provider=args.provider,
        provider_session_id=args.session_id,
        cwd=os.path.abspath(args.cwd or os.getcwd()),
    )
    agent = client.agents.ImportAgent(request, timeout=client.timeout_s).agent
    if console.json:
        console.message(agent)
    else:
        rows = agent.timeline.next_seq - 1
        console.line(
            f"{agent.id} imported: {agent.provider} session {agent.provider_session_id}, "
            f"{rows} rows, {state_label(agent)}"
        )
    return failure.EXIT_OK


def permit(client: Client, console: Console, args: argparse.Namespace) -> int:
    """RespondToPermission: allow (or --deny) REQUEST, or the only pending one."""
    request_id = args.request
    if not request_id:
        agent = client.agents.GetAgent(
            agent_pb.GetAgentRequest(agent_id=args.agent), timeout=client.timeout_s
        ).agent
        pending = [p.id for p in agent.pending_permissions]
        if not pending:
            console.error(
                f"error: FAILED_PRECONDITION: agent {args.agent} has no pending permission"
            )
            return failure.EXIT_BAD_REQUEST
        if len(pending) > 1:
            console.error(
                f"error: INVALID_ARGUMENT: agent {args.agent} has {len(pending)} pending "
                f"permissions ({', '.join(pending)})"
            )
            console.error(f"hint: name one: corral permit {args.agent} REQUEST")
            return failure.EXIT_BAD_REQUEST
        request_id = pending[0]
    behavior = turn_pb.PERMISSION_BEHAVIOR_DENY if args.deny else turn_pb.PERMISSION_BEHAVIOR_ALLOW
    agent = client.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=args.agent, request_id=request_id, behavior=behavior, message=args.message
        ),
        timeout=client.timeout_s,
    ).agent
    if console.json:
        console.message(agent)
    else:
        console.line(f"{'denied' if args.deny else 'allowed'} {request_id} ({state_label(agent)})")
    return failure.EXIT_OK


def archive(client: Client, console: Console, args: argparse.Namespace) -> int:
    """ArchiveAgent: the ids archived, the agent first."""
    reply = client.agents.ArchiveAgent(
        agent_pb.ArchiveAgentRequest(agent_id=args.agent), timeout=client.timeout_s
    )
    if console.json:
        console.message(reply)
    else:
        for agent_id in reply.archived_agent_ids:
            console.line(f"archived {agent_id}")
        for ws in reply.workspaces:
            if ws.removed:
                console.line(f"removed worktree {ws.path} (branch kept)")
            else:
                console.line(f"kept worktree {ws.path}: {ws.kept_reason}")
    return failure.EXIT_OK


def rewind(client: Client, console: Console, args: argparse.Namespace) -> int:
    """Rewind: the timeline re-based under a new epoch to before the user message the
    provider confirmed as MESSAGE_ID (`logs` shows it as `message <id>`)."""
    agent = client.turns.Rewind(
        turn_pb.RewindRequest(agent_id=args.agent, message_id=args.message_id),
        timeout=client.timeout_s,
    ).agent
    if console.json:
        console.message(agent)
    else:
        kept = agent.timeline.next_seq - 1
        console.line(
            f"{agent.id} rewound to before message {args.message_id}: "
            f"{kept} row{'' if kept == 1 else 's'} kept, epoch {agent.timeline.epoch}"
        )
    return failure.EXIT_OK


def queued(client: Client, console: Console, args: argparse.Namespace) -> int:
    """The agent's queued prompts, one line each (Agent.queued_prompts holds summaries), or
    with PROMPT_ID that prompt in full (GetQueuedPrompt): its text, and a line per image."""
    if args.prompt_id:
        prompt = client.turns.GetQueuedPrompt(
            turn_pb.GetQueuedPromptRequest(agent_id=args.agent, client_message_id=args.prompt_id),
            timeout=client.timeout_s,
        ).prompt
        if console.json:
            console.message(prompt)
            return failure.EXIT_OK
        for part in prompt.content:
            if part.WhichOneof("part") == "image":
                console.line(f"[image {part.image.mime_type}, {len(part.image.data)} bytes]")
            else:
                console.line(part.text)
        return failure.EXIT_OK
    agent = client.agents.GetAgent(
        agent_pb.GetAgentRequest(agent_id=args.agent), timeout=client.timeout_s
    ).agent
    for summary in agent.queued_prompts:
        if console.json:
            console.message(summary)
        else:
            console.line(queued_line(summary))
    if not agent.queued_prompts:
        console.note("nothing queued")
    elif any(q.clipped for q in agent.queued_prompts):
        console.note(f"the whole prompt: corral queued {agent.id} PROMPT_ID")
    return failure.EXIT_OK

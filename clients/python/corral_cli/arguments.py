"""Every `corral` command: its arguments, and the help that says what it does and answers.

Must not: call the daemon (each command's function, set as `func`, does).
"""

from __future__ import annotations

import argparse

from corral_cli import commands, follow, fork, providers, show, status, subagents, transfer
from corral_cli import output as output_cli
from corral_cli import schedules as schedules_cli
from corral_cli import search as search_cli
from corral_cli import update as update_cli
from corral_cli import usage as usage_cli
from corral_cli import workspace as workspace_cli
from corral_cli.grammar import (
    EXIT_CODES,
    Parents,
    Parser,
    Subparsers,
    add_globals,
    command,
)
from corral_cli.server_info import VersionRequested


class _VersionAction(argparse.Action):
    """Stops the parse: `corral --version` needs no command (main.py prints the versions)."""

    def __call__(self, *_: object) -> None:
        raise VersionRequested


def build_parser() -> Parser:
    parser = Parser(
        prog="corral",
        description="Run, steer and watch AI coding agents through a corral daemon.",
        epilog=f"{EXIT_CODES}.\nEach command's --help says what it does and what it answers.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        nargs=0,
        help="print the CLI's version and, when one answers at --addr, the daemon's",
    )
    add_globals(parser, listed=True)
    globals_after = Parser(add_help=False)
    add_globals(globals_after, listed=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser(
        "serve", add_help=False, help="run the daemon (all arguments go to it; try serve --help)"
    )
    parents = [globals_after]
    _add_run(sub, parents)
    _add_send(sub, parents)
    _add_turn_control(sub, parents)
    _add_listing(sub, parents)
    _add_following(sub, parents)
    _add_agents(sub, parents)
    update_cli.add_command(sub, parents)
    _add_subagents(sub, parents)
    search_cli.add_command(sub, parents)
    output_cli.add_command(sub, parents)
    workspace_cli.add_commands(sub, parents)
    schedules_cli.add_commands(sub, parents)
    usage_cli.add_command(sub, parents)
    completion = command(
        sub,
        [],
        "completion",
        "Print a shell completion script for bash or zsh.",
        "Load it with `source <(corral completion bash)` (zsh: `corral completion zsh`).",
    )
    completion.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete in")
    return parser


def _agent(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("agent", help="an agent id, or any unique prefix of one")


def _prompt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "prompt", nargs="+", metavar="PROMPT", help="prompt words, joined by spaces; - = stdin"
    )


def _add_run(sub: Subparsers, parents: Parents) -> None:
    run = command(
        sub,
        parents,
        "run",
        "Create an agent with PROMPT as its first prompt and stream that turn.",
        "The reply goes to stdout; the agent id, the turn's start and end, thinking, tools and\n"
        "permissions go to stderr. A prompt the daemon rejects creates no agent (exit 2).\n"
        "Exit 0 when the turn completes, 1 when it fails or is canceled; Ctrl-C cancels it (130).",
    )
    run.add_argument("--provider", default="scripted", help="default %(default)s")
    run.add_argument("--cwd", default=None, help="working directory (default: here)")
    run.add_argument("--title", default="", help="a title for the agent (shown by ls)")
    run.add_argument(
        "--label", action="append", default=[], metavar="K=V", help="a label (repeatable)"
    )
    run.add_argument("--model", default="", help="the provider's model id (see providers)")
    run.add_argument("--mode", default="", help="the provider's mode id (see providers)")
    run.add_argument(
        "--worktree",
        nargs="?",
        const="",
        default=None,
        metavar="BRANCH",
        help="run in a new git worktree of --cwd's repository, on a new branch BRANCH"
        " (default: corral/<title words>)",
    )
    run.add_argument("--base", default="", help="the worktree branch's start (default: HEAD)")
    _prompt(run)
    run.set_defaults(func=commands.run)


def _add_send(sub: Subparsers, parents: Parents) -> None:
    send = command(
        sub,
        parents,
        "send",
        "Send PROMPT to an agent.",
        "Prints `started TURN`, `queued as MESSAGE_ID` (runs after the running turn) or\n"
        "`steered TURN`. While a turn runs the agent is busy (AGENT_BUSY, exit 2) unless\n"
        "--queue, --steer or --replace says what to do. -f streams the turn as run does.",
    )
    _agent(send)
    _prompt(send)
    send.add_argument("-f", "--follow", action="store_true", help="stream the turn like run")
    send.add_argument(
        "--if-running",
        choices=tuple(commands.IF_RUNNING),
        default="reject",
        help="when a turn is already running (default %(default)s)",
    )
    for mode, what in (
        ("queue", "run it after the running turn"),
        ("steer", "into the running turn if the agent can, else queued"),
        ("replace", "cancel the running turn and run this instead"),
    ):
        send.add_argument(
            f"--{mode}", dest="if_running", action="store_const", const=mode, help=what
        )
    send.set_defaults(func=commands.send)


def _add_turn_control(sub: Subparsers, parents: Parents) -> None:
    cancel = command(
        sub,
        parents,
        "cancel",
        "Cancel the agent's running turn.",
        "Prints not_running (nothing ran), settled (the turn ended) or refused (the provider\n"
        "kept the turn going: exit 3). A refused cancel is known after the daemon's settle\n"
        "wait (10 s by default); on a terminal a line says so while it waits.",
    )
    _agent(cancel)
    cancel.set_defaults(func=commands.cancel)
    wait = command(
        sub,
        parents,
        "wait",
        "Wait until the agent is idle, errored, or waiting on a permission.",
        "Prints idle (exit 0), permission NAME (exit 0), errored: MESSAGE (exit 1) or\n"
        "timed out (exit 4, with --for). On a terminal a line says what it waits for.",
    )
    _agent(wait)
    wait.add_argument(
        "--for", dest="timeout_s", type=float, default=None, metavar="S", help="give up after S"
    )
    wait.set_defaults(func=commands.wait)
    permit = command(
        sub,
        parents,
        "permit",
        "Answer a pending permission: allow it, or --deny it.",
        "Prints `allowed ID` or `denied ID`. Without REQUEST the agent must have exactly one\n"
        "pending (else FAILED_PRECONDITION or INVALID_ARGUMENT, exit 2); `corral show` lists them.",
    )
    _agent(permit)
    permit.add_argument(
        "request", nargs="?", default="", help="its id (default: the only one pending)"
    )
    permit.add_argument("--deny", action="store_true", help="deny instead of allow")
    permit.add_argument("--message", "-m", default="", help="a note for the agent")
    permit.set_defaults(func=commands.permit)
    queued = command(
        sub,
        parents,
        "queued",
        "List the agent's queued prompts, or print one of them in full.",
        "Without PROMPT_ID, a line per prompt: its id, when, by what, its size and the start of\n"
        "its text (`nothing queued` on stderr when none). With it, that prompt's text, and a\n"
        "line per image.",
    )
    _agent(queued)
    queued.add_argument(
        "prompt_id", nargs="?", default="", metavar="PROMPT_ID", help="its client_message_id"
    )
    queued.set_defaults(func=commands.queued)


def _add_listing(sub: Subparsers, parents: Parents) -> None:
    ls = command(
        sub,
        parents,
        "ls",
        "List agents, oldest first, one line each.",
        "Columns: ID, STATE (cut to fit; `corral show AGENT` has the whole of it), QUEUED\n"
        "prompts, UPDATED, PROVIDER, TITLE; each line fits the terminal (80 columns when not\n"
        "on one) and ids are whole. `no agents` on stderr when none match.",
    )
    ls.add_argument("--selector", "-l", default="", help="labels: k=v,k!=v,k")
    ls.add_argument("--all", action="store_true", help="include archived agents (marked so)")
    ls.add_argument(
        "--parent", default="", metavar="ID", help="only children of this agent (id or prefix)"
    )
    ls.set_defaults(func=commands.ls)
    shown = command(
        sub,
        parents,
        "show",
        "Print one agent in full.",
        "Its lifecycle, attention, pending permissions, queued prompts, usage, labels,\n"
        "parent and children, timeline head and times.",
    )
    _agent(shown)
    shown.set_defaults(func=show.show)
    state = command(
        sub,
        parents,
        "status",
        "Say whether the daemon is serving, draining or on standby, and count its agents.",
        "Prints the address, the state and the agents by state. A daemon that does not answer\n"
        "is `not reachable` (exit 1).",
    )
    state.set_defaults(func=status.status)
    listed = command(
        sub,
        parents,
        "providers",
        "List the providers the daemon can start agents with.",
        "Columns: NAME, KIND, AVAILABLE (or why not), MODES, MODELS.",
    )
    listed.set_defaults(func=providers.providers)


def _add_following(sub: Subparsers, parents: Parents) -> None:
    logs = command(
        sub,
        parents,
        "logs",
        "Print an agent's timeline: one `#SEQ TIME KIND TEXT` line per row.",
        "An empty timeline says so on stderr. -f follows new rows live, without gaps, with\n"
        "the turns' starts and ends on stderr; it ends (exit 0) when the agent is closed or\n"
        "the daemon ends the stream.",
    )
    _agent(logs)
    logs.add_argument("-f", "--follow", action="store_true", help="follow new rows live")
    logs.add_argument(
        "--limit", type=int, default=200, metavar="N", help="last N rows (0 = all; default 200)"
    )
    logs.add_argument(
        "--projected",
        action="store_true",
        help="one line per entry: a tool call's updates and a message's rows folded, "
        "`#RANGES` naming the rows (-f: an entry again each time a row changes it)",
    )
    logs.add_argument(
        "--until-idle",
        action="store_true",
        help="with -f: exit once the agent is idle or errored (at once if it already is)",
    )
    logs.set_defaults(func=follow.logs, check=follow.check)
    attach = command(
        sub,
        parents,
        "attach",
        "Follow an agent's output live from now on, without its history.",
        "Rows on stdout, the turns' starts and ends and permissions on stderr; Ctrl-C ends it.",
    )
    _agent(attach)
    attach.set_defaults(func=follow.attach)


def _add_agents(sub: Subparsers, parents: Parents) -> None:
    close = command(
        sub, parents, "close", "Close an agent.", "Its record and timeline stay; prints when."
    )
    _agent(close)
    close.set_defaults(func=commands.close)
    reload = command(
        sub,
        parents,
        "reload",
        "Restart the agent's provider session, keeping its id.",
        "Prints the new session and the timeline's epoch. --rehydrate rebuilds the timeline\n"
        "from the provider's history under a new epoch (it may be empty: `logs` says so).",
    )
    _agent(reload)
    reload.add_argument(
        "--rehydrate",
        action="store_true",
        help="rebuild the timeline from the provider's history under a new epoch",
    )
    reload.set_defaults(func=commands.reload)
    archive = command(
        sub,
        parents,
        "archive",
        "Archive an agent and its descendants (closing them).",
        "Prints `archived ID` for each; `ls --all` still lists them, marked archived.",
    )
    _agent(archive)
    archive.set_defaults(func=commands.archive)
    rewind = command(
        sub,
        parents,
        "rewind",
        "Rewind the timeline to before a user message the provider confirmed.",
        "The kept rows go on under a new epoch. `logs` shows `(message ID)` after a confirmed\n"
        "message; an unconfirmed one is MESSAGE_NOT_CONFIRMED (exit 2).",
    )
    _agent(rewind)
    rewind.add_argument(
        "message_id", metavar="MESSAGE_ID", help="the provider's id of the message (see logs)"
    )
    rewind.set_defaults(func=commands.rewind)
    transfer.add_import(sub, parents)
    transfer.add_export(sub, parents)
    fork.add_fork(sub, parents)


def _add_subagents(sub: Subparsers, parents: Parents) -> None:
    spawn = command(
        sub,
        parents,
        "spawn",
        "Spawn a sub-agent of AGENT on TASK (a run).",
        "Prints the run and its child on stderr. --wait then prints the result on stdout and\n"
        "how the run ended (exit 0 ok, 1 otherwise); a failed child ends the run after the\n"
        "daemon's error grace (15 s), and on a terminal a line says so while it waits.",
    )
    spawn.add_argument("agent", help="the requester: an agent id, or a unique prefix")
    spawn.add_argument("task", nargs="+", metavar="TASK", help="task words; - = stdin")
    spawn.add_argument("--label", default="", help="a name for the run")
    spawn.add_argument(
        "--cleanup",
        choices=tuple(subagents.CLEANUP),
        default="keep",
        help="after the run: keep the child agent or delete it (default %(default)s)",
    )
    spawn.add_argument("--provider", default="", help="default: the requester's")
    spawn.add_argument(
        "--run-timeout", type=int, default=0, metavar="S", help="end the run after S seconds"
    )
    spawn.add_argument(
        "--wait", action="store_true", help="wait for the run to end and print its result"
    )
    spawn.set_defaults(func=subagents.spawn)
    runs = command(
        sub,
        parents,
        "runs",
        "List sub-agent runs: every run, or those of AGENT as requester or controller.",
        "Columns: RUN, CHILD, REQUESTER (whole ids), STATE, ANNOUNCE, CREATED, TASK.",
    )
    runs.add_argument("agent", nargs="?", default=None, help="default: every run")
    runs.add_argument("--descendants", action="store_true", help="also every run below the agent")
    runs.add_argument("--active", action="store_true", help="only runs not ended")
    runs.set_defaults(func=subagents.runs)
    kill = command(
        sub,
        parents,
        "kill-run",
        "Kill a sub-agent run.",
        "Prints each run killed; one that had ended already is said so (exit 0).",
    )
    kill.add_argument("run", help="a run id, or a unique prefix of one")
    kill.add_argument("--cascade", action="store_true", help="and every run below it")
    kill.set_defaults(func=subagents.kill_run)

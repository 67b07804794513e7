"""`corral logs`: an agent's timeline, once or followed live (`-f`) without gaps or duplicates.

How `-f` stays exact (the order matters):
  1. Subscribe(agent_ids=[AGENT]) first, so no row appended from now on can be missed.
  2. Read the snapshot (AgentUpserted, then `synced`): the agent's timeline epoch and next_seq
     as of the subscription. Every row below next_seq is history; every row from it on will
     arrive live.
  3. Print history up to next_seq-1 with FetchTimeline AFTER pages (the last `--limit` rows).
  4. Print each live `timeline_row_appended` whose seq is the next one expected. A row beyond
     it (never expected: the daemon's stream has no gaps) is caught up from FetchTimeline
     first; a row at or below the last printed one is a duplicate and dropped.
Turns' starts and ends are noted (on stderr) as they happen; so is an empty timeline. Pending
permissions are noted as the snapshot shows them and as they are asked, each once, with how to
answer; their resolutions too. A `timeline_reset` starts the new epoch at seq 1; an in-stream
`subscription_reset` (this client fell behind) is followed by a fresh snapshot, and step 3
catches up from the last printed row. `stream_ending` prints the resume revision and ends with
exit 0; so does the agent's closed snapshot (after its last rows) or its removal. Ctrl-C exits
130.

Must not: print a row twice, or skip one silently (retention that dropped rows is a note).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from corral.v1 import agent_pb2 as agent_types_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral_cli import failure
from corral_cli.client import Client, stop
from corral_cli.render import (
    Console,
    log_line,
    permission_asked,
    permission_ended,
    state_name,
    turn_boundary,
)

# AFTER page size while catching up (the daemon's default page).
_PAGE_ROWS = 200
_BUSY_STATES = frozenset({"initializing", "running"})


def check(args: argparse.Namespace) -> str:
    """A usage error in `logs`'s options, found before the daemon is called ("" for none)."""
    if args.until_idle and not args.follow:
        return "--until-idle needs -f"
    if args.limit < 0:
        return "--limit must be 0 (everything) or more"
    return ""


def logs(client: Client, console: Console, args: argparse.Namespace) -> int:
    follower: type[Follower] = Follower
    if args.projected:
        # follow_projected builds on this module, so it is loaded only when asked for.
        from corral_cli import follow_projected

        follower = follow_projected.ProjectedFollower
    if args.follow:
        return follower(client, console, args.agent, args.limit, args.until_idle).run()
    page = client.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(
            agent_id=args.agent,
            direction=tl_pb.TIMELINE_DIRECTION_TAIL,
            limit=args.limit,
            view=follower.request_view,
        ),
        timeout=client.timeout_s,
    )
    for row in page.rows:
        _print_row(console, row, args.agent)
    if page.entries:
        follow_projected.print_entries(console, page.entries, args.agent)
    elif not page.rows:
        console.note(empty_timeline(page.epoch, page.window.next_seq))
    return failure.EXIT_OK


def empty_timeline(epoch: str, next_seq: int) -> str:
    """Why `logs` printed no row: nothing was appended in this epoch yet (a new agent, or one
    a reload --rehydrate or a rewind re-based), or what was is no longer kept."""
    if next_seq <= 1:
        return f"the timeline is empty (epoch {epoch}: no row yet)"
    return f"no rows kept of the {next_seq - 1} appended in epoch {epoch}"


def attach(client: Client, console: Console, args: argparse.Namespace) -> int:
    """Follow the agent's output live from now on, without its history."""
    return Follower(client, console, args.agent, 0, False, history=False).run()


def _print_row(console: Console, row: timeline_pb.TimelineRow, agent_id: str) -> None:
    if console.json:
        console.message(row)
    else:
        console.line(log_line(row, agent_id))


def _settled(agent: agent_types_pb.Agent) -> bool:
    """Nothing running and nothing queued to run next."""
    return state_name(agent) not in _BUSY_STATES and not agent.queued_prompts


class Follower:
    # The view the subscription asks for (follow_projected.py asks for PROJECTED).
    request_view: timeline_pb.TimelineView.ValueType = timeline_pb.TIMELINE_VIEW_RAW

    def __init__(
        self,
        client: Client,
        console: Console,
        agent_id: str,
        limit: int,
        until_idle: bool,
        history: bool = True,
    ) -> None:
        self.client = client
        self.console = console
        self.agent_id = agent_id
        self.limit = limit
        self.until_idle = until_idle
        # False (attach): print only what comes after the subscription, no history.
        self.history = history
        # Between a (re)subscription and its `synced`: collecting the snapshot.
        self.in_snapshot = True
        self.agent: agent_types_pb.Agent | None = None
        # The epoch being printed and the next seq to print in it; "" before the first sync.
        self.epoch = ""
        self.expected = 1
        # The permission requests already noted (from a snapshot or live), by id.
        self.asked: set[str] = set()

    def run(self) -> int:
        request = event_pb.SubscribeRequest(agent_ids=[self.agent_id], view=self.request_view)
        call = self.client.events.Subscribe(request)
        try:
            for response in call:
                exit_code = self._handle_all(response.events)
                if exit_code is not None:
                    stop(call)
                    return exit_code
        except (KeyboardInterrupt, RuntimeError) as error:
            if not failure.interrupted(error):
                raise
            stop(call)
            return failure.EXIT_INTERRUPTED
        self.console.note("-- the daemon ended the stream --")
        return failure.EXIT_OK

    def _handle_all(self, events: Iterable[event_pb.Event]) -> int | None:
        for event in events:
            exit_code = self._handle(event)
            if exit_code is not None:
                return exit_code
        return None

    def _handle(self, event: event_pb.Event) -> int | None:
        match event.WhichOneof("payload"):
            case "agent_upserted":
                agent = event.agent_upserted.agent
                if agent.id == self.agent_id:
                    self.agent = agent
                    if not self.in_snapshot:
                        return self._exit_if_done()
            case "agent_removed":
                if event.agent_removed.agent_id == self.agent_id:
                    self.console.note(f"-- agent {self.agent_id} was removed --")
                    return failure.EXIT_OK
            case "synced":
                return self._synced()
            case "subscription_reset":
                self.in_snapshot = True
            case "timeline_reset":
                reset = event.timeline_reset
                if reset.agent_id == self.agent_id and reset.epoch != self.epoch:
                    self._new_epoch(reset.epoch, reset.reason)
            case "timeline_row_appended":
                self._live_row(event.timeline_row_appended)
            case "permission_requested":
                requested = event.permission_requested
                if requested.agent_id == self.agent_id and not self.in_snapshot:
                    self._ask(requested.permission)
            case "permission_resolved":
                resolved = event.permission_resolved
                if resolved.agent_id == self.agent_id and not self.in_snapshot:
                    self.console.note(permission_ended(resolved))
            case "turn_started" | "turn_completed" | "turn_failed" | "turn_canceled":
                self._boundary(event)
            case "stream_ending":
                ending = event.stream_ending
                self.console.note(
                    f"-- the daemon ended the stream ({ending.reason or 'no reason given'}); "
                    f"resume revision {ending.resume_revision} --"
                )
                return failure.EXIT_OK
            case _:
                pass
        return None

    def _synced(self) -> int | None:
        """Step 3: print the history the snapshot's head promises, then go live."""
        self.in_snapshot = False
        epoch, next_seq = self._head()
        if not self.epoch:
            self.epoch = epoch
            if not self.history:
                self.expected = next_seq
            elif self.limit:
                self.expected = max(1, next_seq - self.limit)
        elif epoch != self.epoch:
            self._new_epoch(epoch, "re-based while this client was behind")
        if self.history and next_seq <= 1 and self.expected == 1:
            self.console.note(f"-- {empty_timeline(self.epoch, next_seq)}; following --")
        self._catch_up(next_seq)
        if self.agent is not None:
            for permission in self.agent.pending_permissions:
                self._ask(permission)
        return self._exit_if_done()

    def _boundary(self, event: event_pb.Event) -> None:
        kind = event.WhichOneof("payload")
        assert kind is not None
        agent_id: str = getattr(event, kind).agent_id
        if agent_id == self.agent_id and not self.in_snapshot:
            self.console.note(turn_boundary(event))

    def _ask(self, permission: agent_types_pb.PendingPermission) -> None:
        if permission.id not in self.asked:
            self.asked.add(permission.id)
            self.console.note(permission_asked(self.agent_id, permission))

    def _head(self) -> tuple[str, int]:
        """The timeline's epoch and next_seq as of the subscription."""
        if self.agent is not None:
            return self.agent.timeline.epoch, self.agent.timeline.next_seq
        # Not in the snapshot (e.g. archived): ask the timeline, after subscribing, so rows
        # appended meanwhile arrive both ways and the seq check drops the second copy.
        # An unknown agent fails here with NOT_FOUND.
        page = self.client.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(
                agent_id=self.agent_id, direction=tl_pb.TIMELINE_DIRECTION_TAIL, limit=1
            ),
            timeout=self.client.timeout_s,
        )
        return page.epoch, page.window.next_seq

    def _exit_if_done(self) -> int | None:
        """Exit 0 once the agent is closed (no row can follow: its last rows are stored
        before its closed snapshot is published), or, with --until-idle, settled."""
        if self.agent is not None and state_name(self.agent) == "closed":
            self.console.note(f"-- agent {self.agent_id} is closed --")
            return failure.EXIT_OK
        if self.until_idle and (self.agent is None or _settled(self.agent)):
            return failure.EXIT_OK
        return None

    def _new_epoch(self, epoch: str, reason: str) -> None:
        self.console.note(f"-- timeline reset: new epoch {epoch} ({reason or 'no reason'}) --")
        self.epoch = epoch
        self.expected = 1

    def _live_row(self, appended: event_pb.TimelineRowAppended) -> None:
        row = appended.row
        self._live(
            appended.agent_id,
            appended.epoch,
            row.seq,
            lambda: _print_row(self.console, row, self.agent_id),
        )

    def _live(self, agent_id: str, epoch: str, seq: int, show: Callable[[], None]) -> None:
        """Show what live row `seq` brought if it is the next one expected (catching up from
        FetchTimeline first when it is beyond that)."""
        if self.in_snapshot or agent_id != self.agent_id:
            return
        if epoch != self.epoch:
            return  # an old epoch's row, or a new epoch whose reset is still to come
        if seq < self.expected:
            return  # already printed from history
        if seq > self.expected:
            self._catch_up(seq)
        if seq == self.expected:
            show()
            self.expected = seq + 1

    def _page_after(self, limit: int) -> tl_pb.FetchTimelineResponse:
        """The page after the last row printed, in the view the follower shows."""
        return self.client.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(
                agent_id=self.agent_id,
                direction=tl_pb.TIMELINE_DIRECTION_AFTER,
                cursor=timeline_pb.Cursor(epoch=self.epoch, seq=self.expected - 1),
                limit=limit,
                view=self.request_view,
            ),
            timeout=self.client.timeout_s,
        )

    def _catch_up(self, until_seq: int) -> None:
        """Print rows expected .. until_seq-1 of the current epoch from FetchTimeline."""
        while self.expected < until_seq:
            page = self._page_after(min(_PAGE_ROWS, until_seq - self.expected))
            if page.stale_cursor:
                return  # the epoch moved on; its timeline_reset event is on the way
            if page.gap:
                oldest = page.window.min_seq
                self.console.note(f"-- rows {self.expected}..{oldest - 1} are no longer kept --")
                self.expected = oldest
                continue
            before = self.expected
            for row in page.rows:
                if self.expected <= row.seq < until_seq:
                    _print_row(self.console, row, self.agent_id)
                    self.expected = row.seq + 1
            if self.expected == before:
                return  # no progress (rows retired meanwhile): the live stream goes on

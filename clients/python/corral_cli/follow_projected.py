"""`corral logs --projected`: the timeline's projected view (docs/design.md#projections), one
`#RANGES TIME KIND TEXT` line per entry, where RANGES are the seqs of the rows it was made from
(`#3-4`, `#2,5`).

With `-f` the stream is asked for projected updates: an entry printed once is printed again
each time a later row changes it (a tool call's completion, more of a message), its line
naming its new ranges. Live updates stay gap-free as in `follow.py` (the same subscription
steps), counting by the seq of the row each update was made from.
"""

from __future__ import annotations

from collections.abc import Iterable

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral_cli.follow import Follower
from corral_cli.render import Console, item_text, local_time

PROJECTED = timeline_pb.TIMELINE_VIEW_PROJECTED
_PAGE_ENTRIES = 200


def ranges_text(entry: timeline_pb.TimelineEntry) -> str:
    return ",".join(
        str(r.start) if r.start == r.end else f"{r.start}-{r.end}" for r in entry.source_ranges
    )


def entry_line(entry: timeline_pb.TimelineEntry) -> str:
    when = local_time(entry.updated, "%H:%M:%S")
    kind = entry.item.WhichOneof("kind") or "unknown"
    line = f"#{ranges_text(entry)}  {when}  {kind}  {item_text(entry.item)}".rstrip()
    return line + "  (truncated)" if entry.truncated else line


def print_entry(console: Console, entry: timeline_pb.TimelineEntry) -> None:
    if console.json:
        console.message(entry)
    else:
        console.line(entry_line(entry))


def print_entries(console: Console, entries: Iterable[timeline_pb.TimelineEntry]) -> None:
    for entry in entries:
        print_entry(console, entry)


class ProjectedFollower(Follower):
    """`logs -f --projected`: Follower's subscription steps, printing entries for rows."""

    request_view = PROJECTED

    def _handle(self, event: event_pb.Event) -> int | None:
        if event.WhichOneof("payload") == "timeline_entry_upserted":
            self._live_entry(event.timeline_entry_upserted)
            return None
        return super()._handle(event)

    def _live_entry(self, upserted: event_pb.TimelineEntryUpserted) -> None:
        # An update whose row is already printed (as part of its entry) is dropped.
        entry = upserted.entry
        show = lambda: print_entry(self.console, entry)  # noqa: E731
        self._live(upserted.agent_id, upserted.epoch, upserted.row_seq, show)

    def _catch_up(self, until_seq: int) -> None:
        """Print the entries that begin at expected .. until_seq-1, each with all its rows."""
        while self.expected < until_seq:
            page = self._page_after(_PAGE_ENTRIES)
            if page.reset:
                return  # the epoch moved on (its reset event is on the way) or rows retired
            chosen = [e for e in page.entries if e.seq < until_seq]
            for entry in chosen:
                print_entry(self.console, entry)
            if not chosen:
                return
            # Every row up to the last entry's newest is printed; later rows come live.
            self.expected = max(e.source_ranges[-1].end for e in chosen) + 1
            if len(chosen) < len(page.entries) or not page.has_newer:
                return

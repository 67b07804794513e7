"""The figures of the peer bench (bench/peer.py), gathered over repetitions and printed side by
side: the median of the repetitions with their spread (min-max), and corral's ratio where the
two measure the same path."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable

from bench.peer_turns import Drop, Turn

SIDES = ("opencode", "corral")


class Figures:
    def __init__(self, deltas: int) -> None:
        self.deltas = deltas
        self.turns: dict[tuple[str, str], list[Turn]] = defaultdict(list)
        self.dropped: dict[str, list[Drop]] = defaultdict(list)
        self.pages: dict[tuple[str, str], list[tuple[float, float, int, int]]] = defaultdict(list)
        self.loads: dict[str, list[float]] = defaultdict(list)
        self.idles: dict[str, list[float]] = defaultdict(list)
        self.failures: list[str] = []

    def add(self, side: str, step: str, turn: Turn) -> None:
        self.turns[side, step].append(turn)

    def drops(self, side: str, drop: Drop) -> None:
        self.dropped[side].append(drop)

    def history(self, side: str, pages: dict[str, tuple[float, float, int, int]]) -> None:
        for label, page in pages.items():
            self.pages[side, label].append(page)

    def failed(self, side: str, error: str) -> None:
        self.failures.append(f"{side}: {error}")

    def idle(self, side: str, ms_per_s: float) -> None:
        self.idles[side].append(ms_per_s)

    def load(self, side: str, value: float) -> None:
        self.loads[side].append(value)


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """The median, and the range when there is more than one value."""
    middle = fmt.format(statistics.median(values))
    if len(values) < 2:
        return middle
    return f"{middle} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def per_chunk_us(turn: Turn) -> float:
    """Server CPU per chunk delivered to a watcher (the turn's whole CPU, fixed costs too)."""
    return turn.server_cpu_ns / 1000 / (turn.chunks_per_watcher * turn.watchers)


def marginal_us(low: Turn, high: Turn) -> float:
    """CPU each extra delivered chunk costs: the slope between two watcher counts, which
    leaves out what a turn costs with no one watching (the agent loop, the store)."""
    extra_chunks = high.chunks_per_watcher * high.watchers - low.chunks_per_watcher * low.watchers
    return (high.server_cpu_ns - low.server_cpu_ns) / 1000 / extra_chunks


def _row(
    figures: Figures,
    label: str,
    step: str,
    value: Callable[[Turn], float],
    fmt: str,
    ratio_wanted: bool = True,
) -> str:
    cells = []
    medians = {}
    for side in SIDES:
        values = [value(t) for t in figures.turns[side, step]]
        cells.append(spread(values, fmt) if values else "-")
        if values:
            medians[side] = statistics.median(values)
    ratio = ""
    if ratio_wanted and len(medians) == 2 and medians["corral"]:
        ratio = f"  o/c {medians['opencode'] / medians['corral']:.2f}"
    return f"  {label:<34} opencode {cells[0]:<24} corral {cells[1]:<24}{ratio}"


TURN_ROWS: tuple[tuple[str, Callable[[Turn], float], str, bool], ...] = (
    ("model first byte -> last reply ms", lambda t: t.first_byte_ms, "{:.0f}", True),
    ("model last byte -> last text ms", lambda t: t.last_chunk_ms, "{:.1f}", True),
    ("model last byte -> last reply ms", lambda t: t.last_byte_ms, "{:.1f}", True),
    ("server CPU ms / turn", lambda t: t.server_cpu_ns / 1e6, "{:.1f}", True),
    ("server CPU us / chunk delivered", per_chunk_us, "{:.1f}", True),
    ("event-stream bytes / watcher", lambda t: t.bytes_per_watcher, "{:.0f}", True),
    ("chunks / watcher", lambda t: t.chunks_per_watcher, "{:.1f}", False),
)
STEPS = (
    ("w1", "1 watcher"),
    ("w10", "10 watchers"),
    ("w100", "100 watchers"),
    ("churn", "1 watcher after 111 came and went"),
)


def turn_lines(figures: Figures) -> list[str]:
    lines = []
    for step, title in STEPS:
        if not figures.turns["opencode", step] and not figures.turns["corral", step]:
            continue
        lines.append(f" {title}:")
        for label, value, fmt, ratio in TURN_ROWS:
            lines.append(_row(figures, label, step, value, fmt, ratio))
        acp = [t.agent_cpu_ns / 1e6 for t in figures.turns["corral", step]]
        if acp:
            lines.append(
                f"  {'corral: ACP agent CPU ms / turn':<34} {spread(acp)}"
                " (opencode acp: the loop that runs inside opencode's own server)"
            )
        bad = sum(t.incomplete for s in SIDES for t in figures.turns[s, step])
        if bad:
            lines.append(f"  !! {bad} watcher(s) ended with a reply text not the model's")
    return lines


def marginal_lines(figures: Figures) -> list[str]:
    cells = []
    for side in SIDES:
        pairs = zip(figures.turns[side, "w1"], figures.turns[side, "w100"], strict=False)
        values = [marginal_us(low, high) for low, high in pairs]
        cells.append(spread(values, "{:.2f}") if values else "-")
    return [
        f" server CPU per extra chunk delivered (1 -> 100 watchers), us:"
        f" opencode {cells[0]}, corral {cells[1]}"
    ]


def drop_lines(figures: Figures) -> list[str]:
    lines = [" a watcher drops after a third of the reply, returns a third later:"]
    for side, how in (
        ("opencode", "/event with Last-Event-ID"),
        ("corral", "Subscribe with resume_revision"),
    ):
        drops = figures.dropped[side]
        if not drops:
            continue
        missing = [d.missing for d in drops]
        duplicated = [d.duplicated for d in drops]
        whole = sum(d.text_whole for d in drops)
        lines.append(
            f"  {side} ({how}): of {drops[0].expected} chunks, missing"
            f" {spread([float(m) for m in missing], '{:.0f}')}, duplicated"
            f" {spread([float(d) for d in duplicated], '{:.0f}')};"
            f" reply whole from the stream {whole}/{len(drops)}"
        )
    return lines


def history_lines(figures: Figures) -> list[str]:
    turns = figures.pages.get(("corral", "turns")) or figures.pages.get(("opencode", "turns"))
    if not turns:
        return []  # run without a history
    count = turns[0][2]
    lines = [f" history fetch ({count} turns), median of 10 ms (first fetch after a restart):"]
    for label in ("whole", "last 100 turns", "last 10 turns"):
        cells = {}
        for side in SIDES:
            pages = figures.pages[side, label]
            if pages:
                cells[side] = (
                    f"{spread([p[1] for p in pages], '{:.2f}')} (first"
                    f" {spread([p[0] for p in pages], '{:.1f}')}), {pages[0][2]:,} B,"
                    f" CPU {spread([float(p[3]) for p in pages], '{:.0f}')} us"
                )
        medians = {
            s: statistics.median(p[1] for p in figures.pages[s, label])
            for s in SIDES
            if figures.pages[s, label]
        }
        ratio = ""
        if len(medians) == 2:
            ratio = f"  o/c {medians['opencode'] / medians['corral']:.2f}"
        lines.append(f"  {label:<15} opencode {cells.get('opencode', '-')}")
        lines.append(f"  {'':<15} corral   {cells.get('corral', '-')}{ratio}")
    return lines


def report(figures: Figures) -> str:
    loads = ", ".join(f"{s} {spread(figures.loads[s])}" for s in SIDES if figures.loads[s])
    reps = len(figures.turns["corral", "w1"])
    head = (
        f"P9 against opencode 1.18 (opencode serve vs corral serve + opencode acp), "
        f"{figures.deltas} deltas 0.1 s apart, {reps} repetitions each, alternated, "
        f"median (min-max); o/c = opencode / corral (corral ahead when > 1); load {loads}:"
    )
    idles = getattr(figures, "idles", {})  # figures pickled before idle was measured
    idle = [f" server CPU while idle, ms/s: {s} {spread(idles[s])}" for s in SIDES if idles.get(s)]
    return "\n".join(
        [
            head,
            *idle,
            *turn_lines(figures),
            *marginal_lines(figures),
            *drop_lines(figures),
            *history_lines(figures),
            *(f" !! failed: {f}" for f in getattr(figures, "failures", [])),
        ]
    )


if __name__ == "__main__":
    import pickle

    with open(".bench/peer.pickle", "rb") as raw:
        print(report(pickle.load(raw)))

"""The hot paths under each supported Python, side by side in one run (what
`buildscripts/bench --pythons 3.11,3.13` runs): P1' through the single writer (in memory and
durable), P4 / P5 latency (durable), and replay from the durable store to 1 / 10 / 100
subscribers against the bare batched server of the same Python.

Each Python runs the figures in a child process of its own environment (`python -m
bench.pythons --child`, printing one JSON line); the children alternate, ROUNDS times each,
and the report gives each figure's median and range per Python, and the ratio of the last
Python to the first.

Run: buildscripts/bench --pythons 3.11,3.13 [--quick]
     python -m bench.pythons [--quick] 3.11=/path/to/python 3.13=/path/to/python
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

ROUNDS = 2
SUBSCRIBERS = (1, 10, 100)
# Higher is better for rates, lower for latencies: the ratio says "faster" either way.
LOWER_IS_BETTER = ("ms",)


async def child(quick: bool) -> dict[str, float]:
    from bench import latency, p1, p1_baselines, writer

    rows = 50_000 if quick else 200_000
    figures: dict[str, float] = {
        "P1' in memory, rows/s": await writer.measure(rows),
        "P1' durable, rows/s": await writer.measure(rows, durable=True),
    }
    timed = await latency.measure(10 if quick else 20, durable=True)
    for key in ("p4_p50_ms", "p4_p99_ms", "p5_p50_ms", "p5_p99_ms"):
        figures[f"{key[:2].upper()} durable {key[3:6]}, ms"] = timed[key]
    history = 50_000 if quick else 200_000
    with tempfile.TemporaryDirectory() as state_dir:
        corral = await p1.Corral.start(retain_events=1_000, state_dir=state_dir)
        try:
            await corral.burst(history)
            for n in SUBSCRIBERS:
                per_sub = history if n < 100 else history // 10
                replay = await p1.corral_replay(corral, n, per_sub)
                bare = await p1_baselines.run_baseline("batched", per_sub, n)
                figures[f"store replay {n} subs, events/s"] = replay
                figures[f"store replay {n} subs / bare batched, x"] = replay / bare
        finally:
            await corral.stop()
    return figures


def run_child(python: str, quick: bool) -> dict[str, float]:
    argv = [python, "-m", "bench.pythons", "--child", *(["--quick"] if quick else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{python}: exit {done.returncode}\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def report(results: dict[str, list[dict[str, float]]], load: list[float]) -> str:
    versions = list(results)
    first, last = versions[0], versions[-1]
    head = f"Pythons side by side ({ROUNDS} runs each, alternated; median (min-max)):"
    lines = [head, f"  load {min(load):.1f}-{max(load):.1f}"]
    lines.append(f"  {'figure':<42}" + "".join(f"{v:>26}" for v in versions) + "   ratio")
    for name in results[first][0]:
        cells, medians = [], {}
        for version in versions:
            values = [r[name] for r in results[version]]
            medians[version] = statistics.median(values)
            fmt = "{:,.2f}" if abs(medians[version]) < 100 else "{:,.0f}"
            cell = f"{fmt.format(medians[version])} ({fmt.format(min(values))}-"
            cells.append(f"{cell}{fmt.format(max(values))})")
        ratio = medians[last] / medians[first] if medians[first] else 0.0
        if name.endswith(LOWER_IS_BETTER):
            ratio = 1 / ratio if ratio else 0.0
        lines.append(f"  {name:<42}" + "".join(f"{c:>26}" for c in cells) + f"   {ratio:.2f}")
    lines.append(f"  (ratio: how much faster {last} is than {first}; > 1 = {last} faster)")
    return "\n".join(lines)


def parent(pairs: list[str], quick: bool) -> None:
    pythons = dict(pair.split("=", 1) for pair in pairs)
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    load: list[float] = []
    for round_ in range(ROUNDS):
        order = list(pythons) if round_ % 2 == 0 else list(pythons)[::-1]
        for version in order:
            print(f"pythons: run {round_ + 1}/{ROUNDS} under {version} ...", flush=True)
            load.append(os.getloadavg()[0])
            results[version].append(run_child(pythons[version], quick))
    print(report({v: results[v] for v in pythons}, load))


def main() -> None:
    quick = "--quick" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--quick"]
    if args[:1] == ["--child"]:
        print(json.dumps(asyncio.run(child(quick))))
    else:
        parent(args, quick)


if __name__ == "__main__":
    main()

"""Prometheus metrics (`--metrics-listen HOST:PORT`, the official prometheus-client): read
from the daemon's state when scraped, so nothing is added to a single writer's hot path.

  corral_agents{state}                    agents by lifecycle state (archived ones too)
  corral_turns_total{outcome}             turns started / completed / failed / canceled
  corral_agent_restarts_total             agent processes restarted for a changed provider
  corral_config_reloads_total{outcome}    providers file reloads: applied, unchanged, refused
  corral_events_total                     events published to the hub (its head revision)
  corral_timeline_rows                    rows in every agent's current epoch (sum of seqs)
  corral_subscribers                      open Subscribe / StreamTurn subscriptions
  corral_subscriber_lag_revisions{stat}   how far subscribers are behind the head (max, sum)
  corral_rpc_errors_total{code}           calls answered with an error, by gRPC status
  corral_store_commit_seconds             histogram: each SQLite transaction, BEGIN to COMMIT
  corral_store_commit_jobs                histogram: write jobs that shared a transaction
  corral_provider_call_seconds{kind}      histogram: provider calls (create_session,
                                          start_turn, interrupt, close, steer, ...)
  corral_event_log_pending                events numbered and not yet committed to the log
  corral_event_log_failures_total         event log commits that failed (and were retried)
  corral_store_writable                   0 while commits fail for lack of space (or an I/O
                                          error), 1 otherwise: health stays SERVING meanwhile
  corral_store_write_failures_total       transactions that failed so (store/full_disk.py)
  corral_store_wal_bytes                  the size of the store's write-ahead log file
  corral_usage_input_tokens_total{provider, model}         completed turns' usage, by the
  corral_usage_output_tokens_total{provider, model}        agent's provider and model when the
  corral_usage_cached_input_tokens_total{provider, model}  turn ended (model "" = the
  corral_usage_cost_usd_total{provider, model}             provider's default); with a state
  corral_usage_turns_total{provider, model}                directory they count from the first
                                                           turn the ledger holds, not from start

Every number is the daemon's own (its manager, hub, store and error counter; the provider call
histograms are its manager's `CallTimes`, manager/deadlines.py), so two daemons in one process
never add to each other's. Without a state directory the store and event log metrics stay at
0.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from corral_server.domain.agent import Usage
from corral_server.histogram import SECONDS_BOUNDS, Histogram
from corral_server.hub import EventHub
from corral_server.manager.manager import AgentManager
from corral_server.store.database import COMMIT_JOBS_BOUNDS, Database

_Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily

_STATES = ("initializing", "idle", "running", "errored", "closed")
# A scrape waits at most this long for the daemon's loop.
SCRAPE_S = 5.0


class _Reading(NamedTuple):
    by_state: Counter[str]
    turns: tuple[int, int, int, int]
    head: int
    rows: int
    lags: list[int]
    errors: dict[str, int]
    log_pending: int
    log_failures: int
    usage: dict[tuple[str, str], tuple[Usage, int]]
    restarts: int


class DaemonCollector(Collector):
    """Reads the daemon's state on its own event loop (the scrape runs on an HTTP thread, and
    only the loop may touch the manager and the hub), then reports it."""

    def __init__(
        self,
        manager: AgentManager,
        hub: EventHub,
        loop: asyncio.AbstractEventLoop,
        database: Database | None = None,
        rpc_errors: Counter[str] | None = None,
    ) -> None:
        self._manager = manager
        self._hub = hub
        self._loop = loop
        self._database = database
        # Calls answered with an error, by status code (rpc/error_counts.py, web/app.py).
        self._rpc_errors: Counter[str] = Counter() if rpc_errors is None else rpc_errors

    async def _read(self) -> _Reading:
        agents = self._manager.directory.agents()
        counts = self._manager.turn_counts
        head = self._hub.head_revision
        writer = self._hub.log_writer
        return _Reading(
            Counter(type(a.lifecycle).__name__.lower() for a in agents),
            (counts.started, counts.completed, counts.failed, counts.canceled),
            head,
            sum(a.next_seq - 1 for a in agents),
            [max(0, head - s.delivered_revision) for s in self._hub.subscriptions],
            dict(self._rpc_errors),
            0 if writer is None else writer.pending,
            0 if writer is None else writer.failures,
            dict(self._manager.usage.counters),
            counts.restarts,
        )

    def collect(self) -> Iterator[_Family]:
        reading = asyncio.run_coroutine_threadsafe(self._read(), self._loop).result(SCRAPE_S)
        by_state = reading.by_state
        gauge = GaugeMetricFamily("corral_agents", "Agents by lifecycle state", labels=["state"])
        for state in _STATES:
            gauge.add_metric([state], by_state.get(state, 0))
        yield gauge
        turns = CounterMetricFamily("corral_turns", "Turns by outcome", labels=["outcome"])
        for outcome, value in zip(
            ("started", "completed", "failed", "canceled"), reading.turns, strict=True
        ):
            turns.add_metric([outcome], value)
        yield turns
        yield CounterMetricFamily(
            "corral_agent_restarts", "Agent processes restarted", value=reading.restarts
        )
        yield CounterMetricFamily("corral_events", "Events published", value=reading.head)
        rows = reading.rows
        yield GaugeMetricFamily("corral_timeline_rows", "Rows in current epochs", value=rows)
        lags = reading.lags
        yield GaugeMetricFamily("corral_subscribers", "Open subscriptions", value=len(lags))
        lag = GaugeMetricFamily(
            "corral_subscriber_lag_revisions", "Subscribers behind the head", labels=["stat"]
        )
        lag.add_metric(["max"], max(lags, default=0))
        lag.add_metric(["sum"], sum(lags))
        yield lag
        errors = CounterMetricFamily("corral_rpc_errors", "Error answers", labels=["code"])
        for code, value in sorted(reading.errors.items()):
            errors.add_metric([code], value)
        yield errors
        yield GaugeMetricFamily(
            "corral_event_log_pending", "Events not yet committed", value=reading.log_pending
        )
        yield CounterMetricFamily(
            "corral_event_log_failures", "Failed event log commits", value=reading.log_failures
        )
        yield from self._store()
        yield from _usage(reading.usage)
        yield from self._histograms()

    def _store(self) -> Iterator[_Family]:
        """Read here, on the scrape's thread: two plain attributes and one stat."""
        disk = None if self._database is None else self._database.full_disk
        writable = 1 if disk is None or disk.writable else 0
        yield GaugeMetricFamily("corral_store_writable", "Store commits succeed", value=writable)
        failures = 0 if disk is None else disk.failures
        yield CounterMetricFamily(
            "corral_store_write_failures", "Commits failed for lack of space", value=failures
        )
        wal = 0 if disk is None else disk.wal_bytes()
        yield GaugeMetricFamily("corral_store_wal_bytes", "Write-ahead log bytes", value=wal)

    def _histograms(self) -> Iterator[HistogramMetricFamily]:
        """The histograms; each is safe to read from the scrape's thread."""
        commit = HistogramMetricFamily("corral_store_commit_seconds", "Store transactions")
        jobs = HistogramMetricFamily("corral_store_commit_jobs", "Write jobs per transaction")
        database = self._database
        # Without a store: empty histograms, so the series exist at 0.
        _add(commit, [], database.commit_seconds if database else Histogram(SECONDS_BOUNDS))
        _add(jobs, [], database.commit_jobs if database else Histogram(COMMIT_JOBS_BOUNDS))
        yield commit
        yield jobs
        calls = HistogramMetricFamily(
            "corral_provider_call_seconds", "Provider calls by kind", labels=["kind"]
        )
        for kind, histogram in self._manager.call_times.by_call():
            _add(calls, [kind], histogram)
        yield calls


_USAGE_FIELDS = (
    ("input_tokens", "Input tokens of completed turns"),
    ("output_tokens", "Output tokens of completed turns"),
    ("cached_input_tokens", "Cached input tokens of completed turns"),
    ("cost_usd", "Cost in USD of completed turns, as providers report it"),
)


def _usage(counters: dict[tuple[str, str], tuple[Usage, int]]) -> Iterator[CounterMetricFamily]:
    labels = ["provider", "model"]
    keys = sorted(counters)
    for name, text in _USAGE_FIELDS:
        family = CounterMetricFamily(f"corral_usage_{name}", text, labels=labels)
        for key in keys:
            family.add_metric(list(key), getattr(counters[key][0], name))
        yield family
    turns = CounterMetricFamily("corral_usage_turns", "Turns that reported usage", labels=labels)
    for key in keys:
        turns.add_metric(list(key), counters[key][1])
    yield turns


def _add(family: HistogramMetricFamily, labels: list[str], histogram: Histogram) -> None:
    reading = histogram.read()
    buckets = [(repr(float(b)), n) for b, n in zip(reading.bounds, reading.buckets, strict=True)]
    buckets.append(("+Inf", reading.samples))
    family.add_metric(labels, buckets, reading.total)


def registry_for(
    manager: AgentManager,
    hub: EventHub,
    loop: asyncio.AbstractEventLoop,
    database: Database | None = None,
    rpc_errors: Counter[str] | None = None,
    reloads: Mapping[str, int] | None = None,
) -> CollectorRegistry:
    """A registry of this daemon's own (prometheus-client's default registry is the
    process's, and holds nothing of ours)."""
    registry = CollectorRegistry()
    registry.register(DaemonCollector(manager, hub, loop, database, rpc_errors))
    if reloads is not None:
        registry.register(_ReloadCollector(reloads))
    return registry


class _ReloadCollector(Collector):
    """Reloads of the providers file by outcome (plain ints, read on the scrape's thread)."""

    def __init__(self, reloads: Mapping[str, int]) -> None:
        self._reloads = reloads

    def collect(self) -> Iterator[_Family]:
        family = CounterMetricFamily("corral_config_reloads", "Config reloads", labels=["outcome"])
        for outcome, value in sorted(self._reloads.items()):
            family.add_metric([outcome], value)
        yield family

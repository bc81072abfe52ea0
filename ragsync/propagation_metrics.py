"""Prometheus metrics of propagation: a histogram per event kind and copy, events over the bound, and
the deny-set clears waiting for a retry.

Observed by the worker that confirms each revocation or deletion (streams.tracking.Tracker's
`observe`), in the process that applies it, into one registry per process (`process_metrics`);
every app registry (ragsync.metrics.new_registry) forwards it, so `ragsync serve` exports them on its
operator listener and a cluster worker on a listener of its own (`worker_metrics_port`). The same
figures, over any period, come from the stored records: `ragsync audit propagation`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from indexer.propagation import CONVERGED, PropagationRecord

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class PropagationMetrics:
    def __init__(self, registry: CollectorRegistry, bound_s: float) -> None:
        self.bound_s = bound_s
        self.seconds = Histogram(
            "ragsync_propagation_seconds",
            "Seconds from a revocation's or deletion's publish until it reached a copy: effective (deny set,"
            " i.e. every query), each store, the cache, converged (every store durable).",
            ["kind", "copy"],
            buckets=BUCKETS,
            registry=registry,
        )
        self.over_bound = Counter(
            "ragsync_propagation_over_bound_total",
            "Revocations and deletions that converged later than revocation_bound_s after their publish.",
            ["kind"],
            registry=registry,
        )

        self.clears_waiting = Gauge(
            "ragsync_deny_clears_waiting",
            "Documents whose deny-set entry should be cleared but whose clear failed (the deny set did not"
            " answer) or waits for an older event: retried by the worker (streams.deny_clears).",
            registry=registry,
        )

    def watch_clears(self, waiting: Callable[[], int]) -> None:
        """Read the gauge of waiting clears from the worker's tracker at each scrape."""
        self.clears_waiting.set_function(lambda: float(waiting()))

    def observe(self, record: PropagationRecord) -> None:
        delays = record.delays()
        for copy, seconds in delays.items():
            self.seconds.labels(record.kind, copy).observe(max(0.0, seconds))
        if delays.get(CONVERGED, 0.0) > self.bound_s:
            self.over_bound.labels(record.kind).inc()


_PROCESS = CollectorRegistry()
_METRICS: list[PropagationMetrics] = []
_LOCK = threading.Lock()


def process_metrics(bound_s: float) -> PropagationMetrics:
    """This process's propagation metrics (one set, whoever observes: the owner, a Faust worker)."""
    with _LOCK:
        if not _METRICS:
            _METRICS.append(PropagationMetrics(_PROCESS, bound_s))
        return _METRICS[0]


class ProcessMetrics(Collector):
    """Forwards the process's propagation metrics into an app's registry at scrape time."""

    def collect(self) -> Iterator[Metric]:
        yield from _PROCESS.collect()

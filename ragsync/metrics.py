"""Operator metrics: the registry every app and worker collects into, the collectors read at scrape
time, the /metrics endpoint, and the rule that keeps them on loopback unless a credential guards them.

Why metrics are kept from askers: they hold per-reason abstention counts, so a caller that diffs
them around its own ask learns whether a document it may not read exists (issue 8, item 9).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ragsync.dead_letters import DLQ_GROUP
from ragsync.propagation_metrics import ProcessMetrics
from ragsync.settings import Settings, SettingsError
from streams.ports import EVENT_TOPICS, TOPIC_DLQ, EventLog

log = logging.getLogger("ragsync.server")  # the name it had before the split (issue 21), for log filters

INDEXER_GROUP = "ragsync-indexer"
"""The consumer group of the indexer (embedded worker and Faust agents)."""

_COUNTING_GROUP = "ragsync-metrics"
"""Never commits, so its lag is every record the log still holds (published since the start)."""


def new_registry() -> CollectorRegistry:
    """A registry with process, platform and GC metrics; one per app, so test apps never share counts."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(ProcessMetrics())  # revocation and deletion propagation, observed by this process's worker
    return registry


class EventLogCollector(Collector):
    """Ingest figures read from the event log at scrape time, so they hold across processes: a worker
    in another process (or on another machine, with Kafka) is counted the same as one in-process."""

    def __init__(self, events: Callable[[], EventLog]) -> None:
        self._events = events

    def collect(self) -> Iterator[Metric]:
        published = CounterMetricFamily(
            "ragsync_events_published", "Events in the log per topic (what the connectors published).", labels=["topic"]
        )
        applied = CounterMetricFamily(
            "ragsync_events_applied", "Events the indexer applied and committed, per topic.", labels=["topic"]
        )
        backlog = GaugeMetricFamily(
            "ragsync_events_backlog", "Events published but not yet applied, per topic.", labels=["topic"]
        )
        dead = GaugeMetricFamily("ragsync_dead_letters", "Dead-lettered events not yet replayed (`ragsync dlq list`).")
        dead_total = CounterMetricFamily("ragsync_dead_letters", "Events ever dead-lettered (still in the log).")
        try:
            events = self._events()
            for topic in EVENT_TOPICS:
                total = events.lag(topic, _COUNTING_GROUP)
                pending = events.lag(topic, INDEXER_GROUP)
                published.add_metric([topic], total)
                applied.add_metric([topic], max(0, total - pending))
                backlog.add_metric([topic], pending)
            dead.add_metric([], events.lag(TOPIC_DLQ, DLQ_GROUP))
            dead_total.add_metric([], events.lag(TOPIC_DLQ, _COUNTING_GROUP))
        except Exception as exc:  # a scrape must answer even when the log is down; the gap shows it
            log.warning("event log metrics unavailable: %s", type(exc).__name__)
            return
        yield from (published, applied, backlog, dead, dead_total)


def metrics_endpoint(registry: CollectorRegistry, token: str = "") -> Callable[[Request], Awaitable[Response]]:
    """GET /metrics in Prometheus text format; with a token, only to `Authorization: Bearer <token>`."""
    expected = f"Bearer {token}".encode()

    async def metrics(request: Request) -> Response:
        if token and not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            return JSONResponse({"error": "operator credential required"}, 401, {"WWW-Authenticate": "Bearer"})
        return Response(render_metrics(registry), media_type=CONTENT_TYPE_LATEST)

    return metrics


def metrics_app(registry: CollectorRegistry, token: str = "") -> Starlette:
    """The operator listener's whole app."""
    return Starlette(routes=[Route("/metrics", metrics_endpoint(registry, token), methods=["GET"])])


def render_metrics(registry: CollectorRegistry) -> bytes:
    """The registry's text; under gunicorn workers (PROMETHEUS_MULTIPROC_DIR) every worker's counts
    summed from their files, plus the figures read live from the event log."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return generate_latest(registry)
    from prometheus_client import multiprocess

    combined = CollectorRegistry()
    multiprocess.MultiProcessCollector(combined)  # type: ignore[no-untyped-call]
    live = CollectorRegistry()
    for collector in _LIVE.get(registry, []):
        live.register(collector)
    return generate_latest(combined) + generate_latest(live)


_LIVE: weakref.WeakKeyDictionary[CollectorRegistry, list[Collector]] = weakref.WeakKeyDictionary()
"""Collectors read at scrape time, per registry (multiprocess mode renders them beside the files)."""


def register_live(registry: CollectorRegistry, collector: Collector) -> None:
    """Register a collector read at scrape time, also where multiprocess mode renders the registry."""
    registry.register(collector)
    _LIVE.setdefault(registry, []).append(collector)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def metrics_guard(settings: Settings) -> str:
    """What guards a metrics listener, for its startup line: with no token, every account of the machine
    can read them on loopback too, so the line says so rather than looking safe."""
    if settings.metrics_token:
        return "(Bearer metrics_token)"
    return "(no credential: any local account can read them; set metrics_token to require one)"


def check_metrics_exposure(settings: Settings) -> None:
    """Operator metrics leave the machine only behind a credential (fail closed on a misconfiguration)."""
    if settings.metrics_port is not None and not _is_loopback(settings.metrics_host) and not settings.metrics_token:
        raise SettingsError(
            [
                f"metrics_host {settings.metrics_host!r} is not a loopback address: set metrics_token "
                "(scrapers then send Authorization: Bearer <metrics_token>) or keep metrics_host = 127.0.0.1"
            ]
        )

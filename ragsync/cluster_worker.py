"""The cluster profile's indexer process: one Faust worker (streams.faust_app) wired from settings.

This is where the worker meets the settings and the rest of ragsync, which streams/ may not import:
it creates the topics, builds the stores for the profile (ragsync.wiring), serves the worker's own
propagation metrics (ragsync.metrics, ragsync.listeners) and runs the physical purges
(ragsync.purge). `ragsync worker` on the cluster profile, or `python -m ragsync.cluster_worker`.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from typing import Any

import faust
from kafka import KafkaAdminClient

from ragsync.listeners import bind, serve_in_thread
from ragsync.metrics import check_metrics_exposure, metrics_app, metrics_guard, new_registry
from ragsync.propagation_metrics import PropagationMetrics
from ragsync.purge import scheduled_purges
from ragsync.settings import Settings, SettingsError
from ragsync.wiring import build
from streams.appliers import Indexer, lower_priority
from streams.faust_app import Deployment, build_app, close_deny_reader
from streams.kafka_admin import ensure_topics

log = logging.getLogger("streams.faust_app")  # the name it had before the move (issue 21), for log filters


def run_worker(settings: Settings, *, loglevel: str = "info", app_id: str | None = None) -> None:
    """Create the topics if needed, wire the stores, and run one Faust worker until it is stopped.

    Start several (same settings, same app id) to share the partitions. SIGTERM/SIGINT stop it
    gracefully; a SIGKILL loses nothing either, since offsets are committed only after apply.
    """
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap, client_id="ragsync-worker-admin")
    try:
        partitions = ensure_topics(admin, settings.kafka_topic_prefix, settings.kafka_partitions)
    finally:
        admin.close()
    components = build(settings)
    load_model_at_low_priority(components)
    # One line per HTTP request to Elasticsearch would drown the worker's own log at INFO.
    for noisy in ("elastic_transport", "elastic_transport.transport", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        registry = new_registry()
        metrics = PropagationMetrics(registry, settings.revocation_bound_s)
        if settings.worker_metrics_port is not None:
            check_metrics_exposure(settings)
            try:
                listener = bind(settings.metrics_host, settings.worker_metrics_port)
            except SettingsError as exc:  # a second worker on this host: the first one serves the port
                log.warning("worker metrics not served: %s", "; ".join(exc.problems))
            else:
                serve_in_thread(metrics_app(registry, settings.metrics_token), listener)
                log.info("worker metrics on %s/metrics %s", listener.url, metrics_guard(settings))
        tracker = components.tracker(observe=metrics.observe)
        metrics.watch_clears(tracker.clears_waiting)
        tracker.sweep(components.docs)
        indexer = Indexer(
            components.sink(),
            revocation_bound_s=settings.revocation_bound_s,
            tracker=tracker,
            maintain=scheduled_purges(components),
        )
        deployment = Deployment(
            settings.kafka_bootstrap, settings.kafka_topic_prefix, settings.kafka_partitions, settings.home / "faust"
        )
        app = build_app(deployment, indexer, app_id=app_id, partitions=max(len(p) for p in partitions.values()))
        started = time.monotonic()
        log.info(
            "faust worker %s on %s (prefix %r)", app.conf.id, settings.kafka_bootstrap, settings.kafka_topic_prefix
        )
        worker = faust.Worker(app, loglevel=loglevel, quiet=True)
        try:
            worker.execute_from_commandline()
        finally:
            log.info("faust worker stopped after %.0fs: %s", time.monotonic() - started, indexer.summary())
            close_deny_reader(app)
            indexer.close()
    finally:
        components.close()


def load_model_at_low_priority(components: Any) -> None:
    """Load the embedding model from a thread that lowered its OS priority first.

    ONNX Runtime creates its intra-op threads when the model loads, and a Linux thread inherits its
    creator's priority: loaded from such a thread, all of embedding (the documents thread lowers its
    own priority too, streams.faust_app.DOCUMENTS_NICE) yields the CPU to the access appliers.
    """
    failure: list[BaseException] = []

    def load() -> None:
        lower_priority()
        try:
            _ = components.embedder
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    loader = threading.Thread(target=load, name="ragsync-model-load")
    loader.start()
    loader.join()
    if failure:
        raise failure[0]


def main(argv: list[str] | None = None) -> None:
    """`python -m ragsync.cluster_worker`: settings from RAGSYNC_* as everywhere else."""
    parser = argparse.ArgumentParser(prog="python -m ragsync.cluster_worker", description=__doc__.split("\n")[0])
    parser.add_argument("--loglevel", default="info")
    parser.add_argument("--app-id", default=None, help="consumer group (default: <topic prefix>indexer)")
    args = parser.parse_args(argv)
    run_worker(Settings(), loglevel=args.loglevel, app_id=args.app_id)


if __name__ == "__main__":
    main()

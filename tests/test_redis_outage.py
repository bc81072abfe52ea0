"""A Redis outage leaves answers correct: the cluster's cache and deny set on a PRIVATE Redis (its own
port, its own process, stopped and resumed by this test; the shared one is never touched), the
passages in the real Elasticsearch.

The outage is a paused process (SIGSTOP), so Redis comes back with everything it held: the answer
cached before the revocation and the tenant's old generation, the case that matters. A revocation
applied while Redis is down reaches Elasticsearch (the stores never depend on Redis); its cache
invalidation fails, as in a worker that would retry it. During the outage queries miss the cache
and read the stores; after it, the stale cached entry is found under the unchanged generation, and
reading it back from the store of record refuses it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port, require_service, unique
from test_effective_before_converged import AS_OF, HAL, QUESTION, TEXT, record
from test_indexing import acl, upsert

from indexer.sink import IndexSink
from query.extractive import ExtractiveModel
from query.retrieval import RetrievalSettings, Retriever
from query.worker import QueryWorker
from streams.tracking import Tracker

ES = "http://127.0.0.1:9200"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("RAGSYNC_REQUIRE_SERVICES") == "1":
            pytest.fail("redis-server is not installed (compose/local/services up redis installs it)")
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield proc, f"redis://127.0.0.1:{port}/0"
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(10)


@pytest.mark.cluster
def test_answers_stay_correct_through_a_redis_outage(private_redis: tuple[subprocess.Popen[bytes], str]) -> None:
    require_service("elasticsearch")
    from indexer.elastic import ElasticLexicalIndex
    from indexer.elastic_audit import ElasticDeletionAudit
    from indexer.elastic_state import ElasticDocStates
    from indexer.redis_cache import RedisCache
    from indexer.redis_deny import RedisDenySet

    proc, url = private_redis
    prefix = unique("ragsync-test-")
    lexical = ElasticLexicalIndex(ES, prefix=prefix)
    docs, audit = ElasticDocStates(ES, prefix=prefix), ElasticDeletionAudit(ES, prefix=prefix)
    cache, deny = RedisCache(url, namespace="outage"), RedisDenySet(url, namespace="outage")
    sink = IndexSink(lexical, None, None, docs, audit, cache)
    retriever = Retriever(lexical, None, None, cache, RetrievalSettings(k=4), deny=deny)
    worker = QueryWorker(retriever, ExtractiveModel(), "secret")
    tracker = Tracker(deny, None)
    parts: list[Any] = [lexical, docs, audit, cache, deny]
    try:
        sink.apply(upsert(1, TEXT, acl=("group:hr",), doc="t:salaries.md"))
        assert worker.ask(HAL, QUESTION, AS_OF).answered
        assert worker.ask(HAL, QUESTION, AS_OF).trace.searches[0].cached, "cached in the private Redis"

        proc.send_signal(signal.SIGSTOP)  # the outage: connections time out
        revoke = acl(2, ("group:hr-leads",), doc="t:salaries.md")
        tracker.consumed(record(revoke))  # the deny entry cannot be written: the worker carries on
        assert tracker.deny_failures == 1
        with pytest.raises(Exception):  # noqa: B017  (the bump's Redis error, whatever its class)
            sink.apply(revoke)  # Elasticsearch has the new ACL; the invalidation failed, to be retried
        during = worker.ask(HAL, QUESTION, AS_OF)
        assert not during.answered and not during.trace.searches[0].cached

        proc.send_signal(signal.SIGCONT)  # back, with the stale entry and the old generation
        after = worker.ask(HAL, QUESTION, AS_OF)
        assert not after.answered, "the entry cached before the revocation is never served"
        assert not after.trace.searches[0].cached

        sink.apply(revoke)  # the worker's retry: now the bump succeeds
        tracker.applied(record(revoke), revoke, None)
        tracker.confirmed([revoke])
        assert deny.lookup("acme", ["t:salaries.md"]) == []
        assert not worker.ask(HAL, QUESTION, AS_OF).answered
    finally:
        proc.send_signal(signal.SIGCONT)
        lexical.drop_all()
        docs.drop_all()
        audit.drop_all()
        for part in parts:
            part.close()

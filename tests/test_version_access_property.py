"""Access belongs to each version (issue 18 item 1), proved against a reference model.

A version of a document may be read as of an instant t only by an entry that every ACL in force
from t until now names: its own ACL then, and every later one. So narrowing reaches every version
at once, and widening never reaches back (a reader added today cannot read yesterday's version, nor
today's as of yesterday).

Hypothesis generates a document's history as a connector emits it (upserts with an ACL, ACL-only
changes widening and narrowing, single users added later, deletions, re-creation; one second or
more apart), delivers it as the event logs may (the three topics interleaved, each in order,
anything redelivered), through the real decode path and sink into real stores, then asks every
store, for every principal and every whole second of the history (and now), which passages its
permission filter admits (the vector store twice: by passage vector and by sentence vectors, which
the stores are opened to keep). Each (version, principal, instant) decision is compared with the
reference model below, which knows nothing of grants or watermarks:
- wider than the reference: never, in any delivery order;
- stricter: never when the history is delivered in order (redeliveries included); an event
  overtaken by a newer one may make the stores stricter (they cannot know when a reader dropped by
  it was granted again), which is counted.

CI: the embedded stores (SQLite FTS5, qdrant-edge), a rotating seed and 150 histories; Elasticsearch
and the Qdrant server with 25. The long run: `HYPOTHESIS_PROFILE=long python3 -m pytest -p
no:cacheprovider tests/test_version_access_property.py -s` (thousands of histories, figures printed).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import QDRANT_URL, require_service, unique
from histories import Op
from histories import history as emitted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.cache import InProcessCache
from indexer.sink import IndexSink
from indexer.state import SqliteDeletionAudit, SqliteDocStates
from query.retrieval import passage_sentence_texts
from schemas.events import AclPayload, DeletePayload, Event, UpsertPayload
from schemas.principal import AccessFilter
from streams.dispatch import Stats, handle
from streams.ports import Record, topic_for

# A rotating seed: every run tries other histories (a failure prints the one to reproduce it with).
settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("long", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("bench", max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
CLUSTER_EXAMPLES = {"ci": 25, "bench": 100}.get(PROFILE, 300)
TANTIVY_EXAMPLES = {"ci": 60, "bench": 300}.get(PROFILE, 1000)
"""Fewer than FTS5's: each write of the Tantivy store is a Tantivy commit too (about 0.1 s on this machine)."""

SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
"""Stores of thrown-away histories in memory: hundreds of histories, each with its own files."""
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
DOC = "a.md"
ENTRIES = ("group:staff", "group:hr", "group:board", "user:ann", "user:carl")
PRINCIPALS: tuple[tuple[str, ...], ...] = (
    *((e,) for e in ENTRIES),
    ("group:staff", "user:carl"),
    ("group:hr", "group:board", "user:ann"),
)
COUNTS: dict[str, int] = {"histories": 0, "pairs": 0, "allowed": 0, "wider": 0, "stricter": 0, "stricter_in_order": 0}


acls = st.lists(st.sampled_from(ENTRIES), max_size=4, unique=True).map(lambda xs: tuple(sorted(xs)))
ops = st.one_of(
    st.builds(Op, st.just("upsert"), acls, gap_s=st.integers(1, 3)),
    st.builds(Op, st.just("acl"), acls, gap_s=st.integers(1, 3)),
    st.builds(Op, st.just("delete"), st.just(()), gap_s=st.integers(1, 3)),
)


def plan(doc: str, version: int, op: Op) -> str:
    return f"# Plan\n\n## Part\n\nCanary v{version} says the plan of version {version}.\n"


def history(steps: list[Op]) -> list[Event]:
    """Of the one document DOC, seconds apart (the steps' gaps)."""
    return emitted(DOC, steps, T0, plan)


def reference(events: list[Event], entries: tuple[str, ...], version: int, t: datetime) -> bool:
    """Whether a principal with these entries may read `version` as of `t`: the plain rule, nothing else.

    A deletion removes every version up to it for good; the document's life after its last deletion
    is all that can be read. The version must be the content in force at t, and every ACL in force
    from t until now must name one of the entries: the same one throughout, since the filter admits
    a principal through any single entry that holds.
    """
    deleted = max((e.version for e in events if isinstance(e.payload, DeletePayload)), default=0)
    if version <= deleted:
        return False
    life = [e for e in events if e.version > deleted]
    upserts = [e for e in life if isinstance(e.payload, UpsertPayload)]
    mine = next(i for i, e in enumerate(upserts) if e.version == version)
    start = upserts[mine].occurred_at
    end = upserts[mine + 1].occurred_at if mine + 1 < len(upserts) else None
    if not (start <= t and (end is None or t < end)):
        return False
    acl_events = [e for e in life if isinstance(e.payload, UpsertPayload | AclPayload)]
    in_force = [i for i, e in enumerate(acl_events) if e.occurred_at <= t]
    if not in_force:
        return False
    later = acl_events[in_force[-1] :]
    return any(all(entry in e.payload.acl for e in later) for entry in entries)  # type: ignore[union-attr]


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[Event], list[Event], bool]:
    """(every event emitted, the order delivered in with duplicates, whether that order is the emitted one)."""
    first = Op("upsert", draw(acls), gap_s=1)
    emitted = history([first, *draw(st.lists(ops, min_size=1, max_size=9))])
    in_order = draw(st.booleans())
    queues: dict[str, list[Event]] = {}
    for event in emitted:
        queues.setdefault("all" if in_order else topic_for(event), []).append(event)
    delivered: list[Event] = []
    while any(queues.values()):
        topic = draw(st.sampled_from(sorted(t for t, q in queues.items() if q)))
        delivered.append(queues[topic].pop(0))
        if draw(st.integers(0, 4)) == 0:  # a redelivery of anything already delivered
            delivered.append(draw(st.sampled_from(delivered)))
    return emitted, delivered, in_order


class HashEmbedder:
    """Stand-in for the model where only the stores' filters are under test: every passage gets a
    vector, and a search with limit above the point count returns every point the filter admits."""

    model_name = "hash-test"
    dim = 8

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.ones((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            rows[i, i % self.dim] += float(len(text) % 7)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """The port's cost measure; characters will do for a stand-in."""
        return [len(t) for t in texts]

    cache = None
    """No embedding cache in front of it (the port's `cache`: None without one)."""

    def forget(self, texts: Sequence[str]) -> tuple[int, list[bytes]]:
        """Holds no cache: nothing to forget (the port's answer without one)."""
        return 0, []

    def present(self, keys: Sequence[bytes]) -> int:
        return 0


@dataclass
class Stores:
    lexical: Any
    vector: Any
    close: Callable[[], None]
    extra: list[Any] = field(default_factory=list)


def _embedded(root: Path) -> Stores:
    from indexer.qdrant_edge import EdgeVectorIndex
    from indexer.sqlite_fts import SqliteLexicalIndex

    lexical = SqliteLexicalIndex(root / "lexical.db")
    vector = EdgeVectorIndex(root / "vectors", HashEmbedder.dim, sentences=True)

    def close() -> None:
        lexical.close()
        vector.close()

    return Stores(lexical, vector, close)


def _embedded_tantivy(root: Path) -> Stores:
    from indexer.qdrant_edge import EdgeVectorIndex
    from indexer.tantivy_lexical import TantivyLexicalIndex

    lexical = TantivyLexicalIndex(root / "lexical.db")
    vector = EdgeVectorIndex(root / "vectors", HashEmbedder.dim, sentences=True)

    def close() -> None:
        lexical.close()
        vector.close()

    return Stores(lexical, vector, close)


def _cluster(root: Path) -> Stores:
    require_service("elasticsearch")
    require_service("qdrant")
    from qdrant_client import QdrantClient

    from indexer.elastic import ElasticLexicalIndex
    from indexer.qdrant_server import QdrantVectorIndex

    lexical = ElasticLexicalIndex("http://127.0.0.1:9200", prefix=unique("ragsync-test-"))
    vector = QdrantVectorIndex(
        QdrantClient(url=QDRANT_URL), HashEmbedder.dim, collection=unique("test_passages_"), sentences=True
    )

    def close() -> None:
        lexical.drop_all()
        vector.drop_all()
        lexical.close()
        vector.close()

    return Stores(lexical, vector, close)


def _record(event: Event, offset: int) -> Record:
    return Record(topic_for(event), 0, offset, event.key, event.model_dump_json().encode())


def _instants(emitted: list[Event]) -> Iterator[datetime]:
    last = max(e.occurred_at for e in emitted)
    t = T0 - timedelta(seconds=1)
    while t <= last + timedelta(seconds=1):
        yield t
        yield t + timedelta(milliseconds=500)
        t += timedelta(seconds=1)
    yield datetime.now(UTC)


def check_history(open_stores: Callable[[Path], Stores], case: tuple[list[Event], list[Event], bool]) -> None:
    emitted, delivered, in_order = case
    COUNTS["histories"] += 1
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        root = Path(tmp)
        stores = open_stores(root)
        docs = SqliteDocStates(root / "state.db")
        audit = SqliteDeletionAudit(root / "state.db")
        sink = IndexSink(
            stores.lexical,
            stores.vector,
            HashEmbedder(),
            docs,
            audit,
            InProcessCache(),
            sentence_texts=passage_sentence_texts,
        )
        try:
            for offset, event in enumerate(delivered):
                assert handle(sink, _record(event, offset), Stats(), 30.0) is None, "never dead-lettered"
            sink.flush()
            held = {p.passage_id: p.version for p in stores.lexical.inventory("acme", f"t:{DOC}")}
            versions = {e.version for e in emitted if isinstance(e.payload, UpsertPayload)}
            query = HashEmbedder().embed_query("plan")
            for entries in PRINCIPALS:
                for t in _instants(emitted):
                    access = AccessFilter(tenant="acme", entries=tuple(sorted(entries)), as_of=t)
                    lexical = {p.version for p in stores.lexical.passages(access, list(held))}
                    dense = {h.version for h in stores.vector.search(query, access, 1000, -1.0)}
                    by_sentence = {h.version for h in stores.vector.search_sentences(query, access, 1000, -1.0)}
                    for version in versions:
                        want = reference(emitted, entries, version, t)
                        got_by = (
                            ("lexical", version in lexical),
                            ("vector", version in dense),
                            ("sentence vectors", version in by_sentence),
                        )
                        for store, got in got_by:
                            COUNTS["pairs"] += 1
                            COUNTS["allowed"] += got
                            if got and not want:
                                COUNTS["wider"] += 1
                                pytest.fail(f"{store} admits {entries} to v{version} as of {t}: {emitted}")
                            if want and not got:
                                COUNTS["stricter"] += 1
                                COUNTS["stricter_in_order"] += in_order
                                assert not in_order, f"{store} denies {entries} v{version} as of {t}, in order"
        finally:
            stores.close()
            docs.close()
            audit.close()


@settings(settings.get_profile(PROFILE))
@given(case=deliveries())
def test_each_version_keeps_the_access_it_had_on_the_embedded_stores(case: Any) -> None:
    check_history(_embedded, case)


@settings(settings.get_profile(PROFILE), max_examples=TANTIVY_EXAMPLES)
@given(case=deliveries())
def test_each_version_keeps_the_access_it_had_on_the_embedded_stores_with_tantivy(case: Any) -> None:
    """The same histories with Tantivy as the lexical candidate stage (lexical_engine = "tantivy")."""
    check_history(_embedded_tantivy, case)


@settings(settings.get_profile(PROFILE), max_examples=CLUSTER_EXAMPLES)
@given(case=deliveries())
def test_each_version_keeps_the_access_it_had_on_elasticsearch_and_the_qdrant_server(case: Any) -> None:
    check_history(_cluster, case)


@pytest.mark.parametrize(
    "steps",
    [
        # The case: v1 HR-only holds a secret; one edit removes it and opens the file to staff.
        [Op("upsert", ("group:hr",)), Op("upsert", ("group:hr", "group:staff"))],
        # An ACL-only edit adding staff, and a single user added later.
        [Op("upsert", ("group:hr",)), Op("acl", ("group:hr", "group:staff"))],
        [Op("upsert", ("group:hr",)), Op("upsert", ("group:hr",)), Op("acl", ("group:hr", "user:carl"))],
    ],
)
def test_a_reader_added_later_cannot_read_the_past(steps: list[Op]) -> None:
    """Fails on the design before this issue: the newest ACL was written onto every version."""
    events = history(steps)
    newcomer = ("user:carl",) if "user:carl" in events[-1].payload.acl else ("group:staff",)  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as tmp:
        stores = _embedded(Path(tmp))
        sink = IndexSink(
            stores.lexical,
            stores.vector,
            HashEmbedder(),
            SqliteDocStates(Path(tmp) / "state.db"),
            SqliteDeletionAudit(Path(tmp) / "state.db"),
            InProcessCache(),
        )
        try:
            for offset, event in enumerate(events):
                handle(sink, _record(event, offset), Stats(), 30.0)
            before_edit = events[-1].occurred_at - timedelta(milliseconds=500)
            ids = [p.passage_id for p in stores.lexical.doc_passages("acme", f"t:{DOC}")]
            for who, can_then in ((newcomer, False), (("group:hr",), True)):
                then = AccessFilter("acme", who, before_edit)
                got = stores.lexical.passages(then, ids)
                assert bool(got) is can_then, (who, got)
                assert bool(stores.vector.search(HashEmbedder().embed_query("x"), then, 100, -1.0)) is can_then
            now = AccessFilter("acme", newcomer, datetime.now(UTC))
            assert stores.lexical.passages(now, ids), "the newcomer reads the document now"
        finally:
            stores.close()


def test_report_counts() -> None:
    """The figures of this run, and the property's outcome over them: every pair checked, none wider."""
    print(f"version access property: {COUNTS}")
    if COUNTS["histories"]:
        assert COUNTS["wider"] == 0 and COUNTS["stricter_in_order"] == 0
        assert COUNTS["allowed"] > 0, "a filter that admits nothing is not tested by this property"


def test_a_pending_acl_change_closes_the_past_until_the_stores_hold_it() -> None:
    """The deny set applies an ACL change before the stores do; until they hold its grant instants, a
    question as of an earlier instant cannot tell a reader it adds from one it keeps: denied to all."""
    from conftest import make_passage

    from indexer.deny import DenyEntry, DenyKind, denies

    since = datetime.now(UTC).replace(microsecond=400_000)
    change = DenyEntry("acme", "doc.md", DenyKind.ACL, 3, since, ("group:hr", "group:staff"))
    passage = make_passage("Plan.", acl=("group:hr",), anchor="p-1")
    assert passage.doc_id == "doc.md"
    hr, staff, board = ("group:hr",), ("group:staff",), ("group:board",)
    yesterday = since - timedelta(days=1)
    assert denies(change, passage, AccessFilter("acme", staff, yesterday)), "a reader it adds, as of before it"
    assert denies(change, passage, AccessFilter("acme", hr, yesterday)), "until the stores hold the instants"
    now = since.replace(microsecond=0)  # the query side's default as-of: now, floored to the second
    assert not denies(change, passage, AccessFilter("acme", hr, now))
    assert not denies(change, passage, AccessFilter("acme", staff, now))
    assert denies(change, passage, AccessFilter("acme", board, now)), "a reader it does not name"

"""qdrant-edge's search checks grant instants on its hits, not inside the filter: the same answers.

The grant instants (`acl_since.<key>`) cannot have a payload index, so with them in the filter Qdrant
read every candidate point's payload (most of a dense search's cost when the filter admits every
point). EdgeVectorIndex.search now filters on indexed fields, checks the instants of its hits
(`granted_as_of`) and searches again with the whole filter when one fails. This property test holds
it to the reference semantics (schemas.principal.grants_allow) on the real store: the nearest
admitted points, in order, however the instants fall around the instant asked about.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import numpy as np
from conftest import NOW, make_passage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.qdrant_edge import EdgeVectorIndex
from schemas.principal import AccessFilter, grants_allow

ENTRIES = ("group:staff", "group:hr", "user:ann")
OFFSETS = (-3, -1, 0, 1, 3)  # days from NOW: grant instants and the instants asked about

doc_strategy = st.tuples(
    st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=3, unique=True),
    st.dictionaries(st.sampled_from(ENTRIES), st.sampled_from(OFFSETS), max_size=3),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(doc_strategy, min_size=1, max_size=8),
    asker=st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=3, unique=True),
    as_of_days=st.sampled_from(OFFSETS),
    limit=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_search_answers_as_the_reference_semantics(
    docs: list[tuple[list[str], dict[str, int]]], asker: list[str], as_of_days: int, limit: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    dim = 8
    vectors = rng.standard_normal((len(docs), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = rng.standard_normal(dim).astype(np.float32)
    query /= np.linalg.norm(query)
    as_of = NOW + timedelta(days=as_of_days)
    with tempfile.TemporaryDirectory() as tmp:
        index = EdgeVectorIndex(Path(tmp) / "vectors", dim)
        passages = [make_passage(f"text {i}", doc_id=f"d{i}.md", acl=tuple(acl)) for i, (acl, _) in enumerate(docs)]
        index.upsert(passages, vectors)
        since_of: list[dict[str, object]] = []
        for i, (acl, since) in enumerate(docs):
            instants = {e: NOW + timedelta(days=d) for e, d in since.items() if e in acl}
            index.set_acl("acme", f"d{i}.md", acl, instants)
            since_of.append(instants)
        found = index.search(query, AccessFilter("acme", tuple(asker), as_of), limit, -1.0)
        index.close()
    admitted = [i for i, (acl, _) in enumerate(docs) if grants_allow(asker, acl, since_of[i], as_of)]  # type: ignore[arg-type]
    scores = vectors @ query
    expected = sorted(admitted, key=lambda i: -scores[i])[:limit]
    assert [h.passage_id for h in found] == [passages[i].passage_id for i in expected]


def test_a_nearer_point_granted_later_gives_way_to_the_next_admitted_one(tmp_path: Path) -> None:
    """The case the second search exists for: the nearest point admits the asker only from tomorrow."""
    index = EdgeVectorIndex(tmp_path / "vectors", 2)
    near, far = make_passage("near", doc_id="near.md"), make_passage("far", doc_id="far.md")
    index.upsert([near, far], np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32))
    index.set_acl("acme", "near.md", ["group:staff"], {"group:staff": NOW + timedelta(days=1)})
    hits = index.search(np.array([1.0, 0.0], dtype=np.float32), AccessFilter("acme", ("group:staff",), NOW), 1, -1.0)
    assert [h.passage_id for h in hits] == [far.passage_id]
    index.close()

"""Both Qdrant adapters check grant instants on their hits, not inside the filter: the same answers.

The grant instants (`acl_since.<key>`) cannot have a payload index, so with them in the filter Qdrant
read every candidate point's payload (most of a dense search's cost when the filter admits every
point). EdgeVectorIndex.search (embedded) and QdrantVectorIndex.search (the Qdrant server, cluster)
filter on indexed fields, check the instants of their hits (indexer.payload.granted_as_of) and
search again with the whole filter when one fails. This property test holds both to the reference
semantics (schemas.principal.grants_allow) on the real stores: the nearest admitted points, in order,
however the instants fall around the instant asked about. The server's runs need the local Qdrant
(skipped without it unless RAGSYNC_REQUIRE_SERVICES=1); each example writes a tenant of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from conftest import NOW, VECTOR_FACTORIES, make_passage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.principal import AccessFilter, grants_allow

ENTRIES = ("group:staff", "group:hr", "user:ann")
OFFSETS = (-3, -1, 0, 1, 3)  # days from NOW: grant instants and the instants asked about
DIM = 8

doc_strategy = st.tuples(
    st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=3, unique=True),
    st.dictionaries(st.sampled_from(ENTRIES), st.sampled_from(OFFSETS), max_size=3),
)


@pytest.fixture(params=["qdrant-edge", "qdrant-server"], scope="module")
def index(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One store per adapter for the whole module (DIM = conftest's); examples keep apart by tenant."""
    made = VECTOR_FACTORIES[request.param](tmp_path_factory.mktemp(request.param))
    yield made
    drop = getattr(made, "drop_all", None)
    if drop and not getattr(made, "local", True):
        drop()
    made.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    docs=st.lists(doc_strategy, min_size=1, max_size=8),
    asker=st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=3, unique=True),
    as_of_days=st.sampled_from(OFFSETS),
    limit=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_search_answers_as_the_reference_semantics(
    index: Any, docs: list[tuple[list[str], dict[str, int]]], asker: list[str], as_of_days: int, limit: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((len(docs), DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = rng.standard_normal(DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    as_of = NOW + timedelta(days=as_of_days)
    tenant = f"t{uuid.uuid4().hex[:12]}"
    passages = [
        make_passage(f"text {i}", tenant=tenant, doc_id=f"d{i}.md", acl=tuple(acl)) for i, (acl, _) in enumerate(docs)
    ]
    index.upsert(passages, vectors)
    since_of: list[dict[str, object]] = []
    for i, (acl, since) in enumerate(docs):
        instants = {e: NOW + timedelta(days=d) for e, d in since.items() if e in acl}
        index.set_acl(tenant, f"d{i}.md", acl, instants)
        since_of.append(instants)
    index.flush()
    found = index.search(query, AccessFilter(tenant, tuple(asker), as_of), limit, -1.0)
    admitted = [i for i, (acl, _) in enumerate(docs) if grants_allow(asker, acl, since_of[i], as_of)]  # type: ignore[arg-type]
    scores = vectors @ query
    expected = sorted(admitted, key=lambda i: -scores[i])[:limit]
    assert [h.passage_id for h in found] == [passages[i].passage_id for i in expected]


def test_a_nearer_point_granted_later_gives_way_to_the_next_admitted_one(index: Any) -> None:
    """The case the second search exists for: the nearest point admits the asker only from tomorrow."""
    tenant = f"t{uuid.uuid4().hex[:12]}"
    near = make_passage("near", tenant=tenant, doc_id="near.md")
    far = make_passage("far", tenant=tenant, doc_id="far.md")
    first, second = np.zeros(DIM, dtype=np.float32), np.zeros(DIM, dtype=np.float32)
    first[0], second[:2] = 1.0, (0.6, 0.8)
    index.upsert([near, far], np.stack([first, second]))
    index.set_acl(tenant, "near.md", ["group:staff"], {"group:staff": NOW + timedelta(days=1)})
    index.flush()
    hits = index.search(first, AccessFilter(tenant, ("group:staff",), NOW), 1, -1.0)
    assert [h.passage_id for h in hits] == [far.passage_id]

"""indexer.combine: the calls queued while a write is in flight share the next write; a failing item
fails its own caller only; one key's writes keep their order. Pure (threads, no store)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from hypothesis import given
from hypothesis import strategies as st
from waiting import wait_until

from indexer.combine import Combiner, _Call, rounds


@given(st.lists(st.integers(0, 5), max_size=40), st.integers(1, 6))
def test_rounds_keep_every_call_once_in_order_per_key_and_no_key_twice_per_write(keys: list[int], cap: int) -> None:
    calls = [_Call(i, k) for i, k in enumerate(keys)]
    out = rounds(calls, cap)
    assert sorted(c.item for r in out for c in r) == list(range(len(keys)))
    for r in out:
        assert len(r) <= cap and len({c.key for c in r}) == len(r)
    position = {c.item: n for n, r in enumerate(out) for c in r}
    for key in set(keys):
        mine = [i for i, k in enumerate(keys) if k == key]
        assert [position[i] for i in mine] == sorted(position[i] for i in mine) and len(
            {position[i] for i in mine}
        ) == len(mine)


def test_calls_queued_during_a_write_share_the_next_and_a_bad_item_fails_alone() -> None:
    writes: list[list[int]] = []
    first, release = threading.Event(), threading.Event()

    def write(items: list[int]) -> None:
        if not writes:
            first.set()
            release.wait(30)
        writes.append(items)
        if 13 in items:
            raise ValueError("13 is refused")

    combiner: Combiner[int] = Combiner(write, name="test-combiner")
    with ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(combiner.submit, 0, 0)]
        assert first.wait(10)
        futures += [pool.submit(combiner.submit, i, i) for i in range(10, 20)]
        wait_until(lambda: len(combiner._queue) == 10, 10, "the others queued")
        release.set()
        errors = {i: f.exception() for i, f in zip([0, *range(10, 20)], futures, strict=True)}
    combiner.close()
    assert [i for i, e in errors.items() if e is not None] == [13]
    assert writes[0] == [0] and sorted(writes[1]) == list(range(10, 20)), "one write for the ten queued"
    assert sorted(i for w in writes[2:] for i in w) == list(range(10, 20)), "then each alone"

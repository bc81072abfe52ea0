"""A sync opens its worker and stores while its scan publishes (ragsync.pipeline.sync_source).

Creating a fresh home's vector shard and its field indexes is mostly waiting on the disk, so it runs
on a thread beside the scan. What must hold: nothing is applied before the scan has published, the
scan's own error is the one raised when it fails, and a store that cannot be opened fails the
sync once the scan has published (as when the stores were opened after it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ragsync.pipeline as pipeline
from ragsync.settings import Settings
from ragsync.wiring import build_embedded
from streams.embedded_worker import GROUP


@pytest.fixture
def components(tmp_path: Path) -> Iterator[Any]:
    """A fresh embedded home's components (no model), closed after the test."""
    settings = Settings(home=tmp_path / "home", profile="embedded", session_secret="s" * 32)
    components = build_embedded(settings, with_embedder=False)
    try:
        yield components
    finally:
        components.close()


def unopenable(settled: threading.Event | None = None) -> Callable[..., Any]:
    """An `embedded_worker` whose stores cannot be opened; sets `settled` once it has failed."""

    def worker(components: Any, tracker: Any = None) -> Any:
        try:
            raise OSError("the vector shard cannot be opened")
        finally:
            if settled is not None:
                settled.set()

    return worker


class Spied:
    """The real `embedded_worker`, noting when one was opened and when it was closed."""

    def __init__(self) -> None:
        self.real = pipeline.embedded_worker
        self.opened = threading.Event()
        self.closed: list[bool] = []

    def __call__(self, components: Any, tracker: Any = None) -> Any:
        made = self.real(components, tracker)
        real_close = made.close
        made.close = lambda: self.closed.append(True) or real_close()
        self.opened.set()
        return made


def test_the_worker_is_opened_while_the_scan_publishes(
    drive: Path, components: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, real_publish = Spied(), pipeline.publish_source

    def publish(*args: Any, **kwargs: Any) -> Any:
        # Serially (the stores opened after the scan) this waits out its timeout and fails.
        assert worker.opened.wait(20), "the worker was not opened while the scan ran"
        return real_publish(*args, **kwargs)

    monkeypatch.setattr(pipeline, "embedded_worker", worker)
    monkeypatch.setattr(pipeline, "publish_source", publish)
    report = pipeline.sync_folder(components, drive, tenants=["acme"])
    assert report.scan.upserts == 3
    assert report.stats is not None and report.stats.applied == 3
    assert components.events.lag("documents", GROUP) == 0
    assert worker.closed == [True], "the worker (its sink's threads) was not closed once it had drained"


def test_a_worker_opened_beside_a_failed_scan_is_closed(
    drive: Path, components: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Spied()

    def publish(*args: Any, **kwargs: Any) -> Any:
        assert worker.opened.wait(20)
        raise RuntimeError("the source went away")

    monkeypatch.setattr(pipeline, "embedded_worker", worker)
    monkeypatch.setattr(pipeline, "publish_source", publish)
    with pytest.raises(RuntimeError, match="the source went away"):
        pipeline.sync_folder(components, drive, tenants=["acme"])
    assert worker.closed == [True]


def test_a_failed_scan_raises_its_own_error_after_the_opening_settled(
    drive: Path, components: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settled = threading.Event()

    def publish(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the source went away")

    monkeypatch.setattr(pipeline, "embedded_worker", unopenable(settled))
    monkeypatch.setattr(pipeline, "publish_source", publish)
    with pytest.raises(RuntimeError, match="the source went away"):
        pipeline.sync_folder(components, drive, tenants=["acme"])
    assert settled.is_set()  # the opener finished before the error reached the caller


def test_a_store_that_cannot_be_opened_fails_the_sync_after_the_scan_published(
    drive: Path, components: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "embedded_worker", unopenable())
    with pytest.raises(OSError, match="cannot be opened"):
        pipeline.sync_folder(components, drive, tenants=["acme"])
    # The scan published (its events wait in the log for the next apply); nothing was applied.
    assert components.events.lag("documents", GROUP) == 3

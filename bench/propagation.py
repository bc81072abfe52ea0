#!/usr/bin/env python3
"""Propagation of revocations and deletions behind a document backlog: effective and converged times.

    python3 bench/propagation.py --profile cluster     # Kafka, a Faust worker, Elasticsearch, Qdrant, Redis
    python3 bench/propagation.py --profile embedded    # `ragsync serve` owning a fresh home

Phases (one fresh namespace per run: topics, indexes, collection, Redis keys, home):
  0. index the targets: 200 documents to revoke and 200 to delete, each with a word of its own,
     readable by the probing principal (group:staff); wait until every store has them
  1. publish the backlog: 5,000 document upserts (with the embedding model loaded, minutes of work)
  2. while the backlog drains, publish the 200 revocations and 200 deletions interleaved, one every
     --pace-ms, and for each one measure, from its publish:
       effective: until a query by the affected principal (the real Retriever: the store's BM25 with the
                  permission filter, then the deny set) no longer returns the document;
       converged: until every store and cache holds the new state: the lexical store (no passage
                  readable by the principal / none left), the vector store (likewise, by its own filter),
                  the cache generation bumped, the deny entry cleared (cluster: probed directly; embedded:
                  the worker's own propagation record, since the vector shard is locked by `serve`).
Writes bench/results/propagation-<profile>.json and prints a table. Goals (cluster): effective p99
<= 1 s while the backlog still drains, converged p99 <= 2 s.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from propagation_cluster import Cluster  # noqa: E402
from propagation_embedded import Embedded  # noqa: E402
from propagation_events import (  # noqa: E402
    COSTS,
    RESULTS,
    RETRY_S,
    SOURCE,
    TENANT,
    Probe,
    backlog_content,
    deletion,
    revocation,
    summary,
    target_content,
    target_doc,
    upsert,
)

BUSY_LOOP = "while True: pass"


class BackgroundLoad:
    """N CPU-bound processes of the benchmark's own, so a figure "under load" is reproducible: the
    machine is as busy as the flag says, not as busy as whatever else happened to run. Each is a
    plain busy loop (one core each while it runs), killed by its PID when the run ends. They start
    once the targets are indexed (`start`): phase 0 is setup, not measured, and under the load it
    took longer than the whole measured part."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []
        self.load_at_start: list[float] | None = None

    def start(self) -> None:
        self.load_at_start = loadavg()
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(self.n)]

    def __enter__(self) -> BackgroundLoad:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(runner: Any, args: argparse.Namespace, load: BackgroundLoad) -> dict[str, Any]:
    from query.retrieval import RetrievalSettings, Retriever

    c = runner.components
    retriever = None  # opened once the stores exist (embedded: serve creates them)
    targets = [(k, i) for k in ("rev", "del") for i in range(args.revocations if k == "rev" else args.deletions)]
    docs = [target_doc(k, i) for k, i in targets]
    print(f"phase 0: {len(docs)} targets", flush=True)
    runner.start()
    started = time.monotonic()
    runner.publish([upsert(target_doc(k, i), 1, target_content(k, i)) for k, i in targets])
    while runner.indexed(docs) < len(docs):
        if time.monotonic() - started > args.timeout_s:
            raise SystemExit(f"targets not indexed after {args.timeout_s:.0f}s; see {runner.log_path}")
        time.sleep(1)
    ids = {d: list(c.docs.get(TENANT, d).passage_ids) for d in docs}
    # The affected principal's query: BM25 with the store's permission filter, then the deny set (the
    # real Retriever over the stores serve or the worker writes; no model needed to find one word).
    retriever = Retriever(c.lexical, None, None, None, RetrievalSettings(candidates=10), deny=c.deny)
    print(f"  indexed in {time.monotonic() - started:.0f}s", flush=True)
    if args.profile == "cluster":
        runner.vector  # noqa: B018  (open the probe's client before the clock runs)

    load.start()
    print(f"phase 1: backlog of {args.backlog} upserts ({load.n} busy processes started)", flush=True)
    runner.publish([upsert(f"{SOURCE}:backlog/doc-{i:05d}.md", 1, backlog_content(i)) for i in range(args.backlog)])

    print(
        f"phase 2: {args.revocations} revocations and {args.deletions} deletions, one every {args.pace_ms} ms",
        flush=True,
    )
    probes: list[Probe] = []
    order = [("revocation", i) for i in range(args.revocations)] + [("deletion", i) for i in range(args.deletions)]
    order.sort(key=lambda kv: (kv[1], kv[0]))  # interleaved
    deadline = [time.monotonic() + args.timeout_s]

    # A fixed set of probing threads takes the pending probes in order of when each is due (published,
    # or RETRY_S after its last query), so the probes' own query load stays bounded and no probe
    # starves: one thread per probe, or a pool following each probe to its end while later ones
    # queued, measured the probes' own queue (30 s "effective" while the deny entry took 0.05 s).
    due: list[tuple[float, int, Probe]] = []
    lock = threading.Lock()
    publishing = [True]
    probe_errors: list[str] = []

    def prober() -> None:
        while time.monotonic() < deadline[0]:
            with lock:
                p = heapq.heappop(due)[2] if due and due[0][0] <= time.monotonic() else None
            if p is None:
                if not publishing[0] and not due:
                    return
                time.sleep(0.002)
                continue
            try:
                runner.probe(p, retriever)
            except Exception as exc:  # a store timing out under load: that probe is retried, not lost
                with lock:
                    probe_errors.append(f"{type(exc).__name__}: {exc}")
            if not runner.settled(p):
                with lock:
                    heapq.heappush(due, (time.monotonic() + RETRY_S, p.seq, p))

    backlog_at_start = runner.backlog()
    end_at_start = runner.documents_end()
    events_began = time.monotonic()
    threads = [threading.Thread(target=prober, daemon=True) for _ in range(args.probers or runner.probers)]
    for t in threads:
        t.start()
    for kind, i in order:
        doc = target_doc(kind[:3], i)
        event = revocation(doc) if kind == "revocation" else deletion(doc)
        probe = Probe(kind, i, doc, event, generation=c.cache.generation(TENANT) if args.profile == "cluster" else 0)
        probe.ids = ids[doc]
        probe.published = time.monotonic()
        runner.publish_one(event)
        probe.seq = len(probes)
        probes.append(probe)
        with lock:
            heapq.heappush(due, (probe.published + RETRY_S, probe.seq, probe))
        time.sleep(args.pace_ms / 1000)
    # The backlog as the last event goes out: what was applied while events kept arriving (the rate
    # that says whether the backlog drains during the events, not merely after them).
    published_s = time.monotonic() - events_began
    consumed_publishing = backlog_at_start - runner.backlog() + runner.documents_end() - end_at_start
    deadline[0] = time.monotonic() + args.timeout_s
    publishing[0] = False
    for t in threads:
        t.join()
    runner.finish(probes, deadline[0])
    backlog_at_end = runner.backlog()
    elapsed = time.monotonic() - events_began
    consumed = backlog_at_start - backlog_at_end + runner.documents_end() - end_at_start
    result = report(args, probes, backlog_at_start, backlog_at_end, runner.versions())
    # The documents applied while the events propagated: the backlog keeps draining, it is not
    # starved by the priority given to revocations and deletions.
    result["counts"]["events_phase_s"] = round(elapsed, 1)
    result["counts"]["documents_records_consumed"] = consumed
    result["counts"]["backlog_drained_per_s"] = round(consumed / elapsed, 2)
    result["counts"]["publishing_s"] = round(published_s, 1)
    result["counts"]["documents_consumed_while_publishing"] = consumed_publishing
    result["counts"]["backlog_drained_per_s_while_publishing"] = round(consumed_publishing / published_s, 2)
    # Draining: documents applied while the events were being published, and some left when the last
    # event converged (so every event was measured behind a backlog); a backlog merely not empty at
    # the end (the goal's meaning before) is also a starved one.
    result["goals"]["backlog_still_draining"] = consumed_publishing > 0 and backlog_at_end > 0
    result["worker_records"] = runner.worker_records()
    result["probe_cost_s"] = {name: summary(values) for name, values in COSTS.items()}
    result["probe_errors"] = {"count": len(probe_errors), "first": probe_errors[:3]}
    if args.timeline is not None:
        args.timeline.write_text(json.dumps([timeline_row(p, events_began) for p in probes]) + "\n")
    return result


def timeline_row(p: Probe, began: float) -> dict[str, Any]:
    """One event for --timeline: when it was published in the events phase, and its lags from there."""

    def lag(at: float | None) -> float | None:
        return None if at is None else round(at - p.published, 3)

    return {
        "seq": p.seq,
        "kind": p.kind,
        "published_s": round(p.published - began, 3),
        "effective_s": lag(p.effective),
        "converged_s": lag(p.converged),
        "per_copy_s": p.done,
        "first_query_sent_s": lag(p.first_query_began),
        "effective_query_sent_s": lag(p.effective_query_began),
    }


def report(
    args: argparse.Namespace, probes: list[Probe], backlog_start: int, backlog_end: int, versions: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "profile": args.profile,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "background_load": args.background_load,
        "counts": {
            "backlog_upserts": args.backlog,
            "revocations": args.revocations,
            "deletions": args.deletions,
            "pace_ms": args.pace_ms,
            "documents_backlog_when_events_started": backlog_start,
            "documents_backlog_when_all_converged": backlog_end,
        },
    }
    for kind in ("revocation", "deletion"):
        mine = [p for p in probes if p.kind == kind]
        eff = [p.effective - p.published for p in mine if p.effective is not None]
        conv = [p.converged - p.published for p in mine if p.converged is not None]
        out[kind] = {
            "effective_s": summary(eff),
            "converged_s": summary(conv),
            "per_copy_s": {
                name: summary([p.done[name] for p in mine if name in p.done])
                for name in sorted({n for p in mine for n in p.done})
            },
            "measured": len(mine),
            **(
                {
                    "served_effective_s": summary([p.served - p.published for p in mine if p.served is not None]),
                    "served_measured": sum(1 for p in mine if p.served is not None),
                }
                if args.profile == "embedded"
                else {}
            ),
            # Where `effective` goes (cluster): the first query's wait for a free prober (due RETRY_S
            # after publish), and the effective query's own round trip (sent -> answered).
            **(
                {
                    "probe_anatomy_s": {
                        "first_query_sent": summary(
                            [p.first_query_began - p.published for p in mine if p.first_query_began is not None]
                        ),
                        "effective_query_sent": summary(
                            [p.effective_query_began - p.published for p in mine if p.effective_query_began is not None]
                        ),
                        "effective_query_round_trip": summary(
                            [
                                p.effective - p.effective_query_began
                                for p in mine
                                if p.effective is not None and p.effective_query_began is not None
                            ]
                        ),
                    }
                }
                if args.profile == "cluster"
                else {}
            ),
            "never_effective": sum(1 for p in mine if p.effective is None),
            "never_converged": sum(1 for p in mine if p.converged is None),
        }
    rev, dele = out["revocation"], out["deletion"]
    out["goals"] = {
        "effective_p99_le_1s": max(rev["effective_s"]["p99"], dele["effective_s"]["p99"]) <= 1.0,
        "converged_p99_le_2s": max(rev["converged_s"]["p99"], dele["converged_s"]["p99"]) <= 2.0,
        "backlog_still_draining": None,  # set by run(): documents applied during the events
    }
    import faust

    out["versions"] = {
        "python": platform.python_version(),
        "ragsync": "0.1.0",
        "faust-streaming": getattr(faust, "__version__", "?"),
        "machine": f"{os.cpu_count()} cores",
        **versions,
    }
    return out


def table(result: dict[str, Any]) -> str:
    lines = [f"propagation ({result['profile']}), seconds from publish", f"{'':<12}{'p50':>8}{'p99':>8}{'max':>8}"]
    for kind in ("revocation", "deletion"):
        for what in ("effective_s", "converged_s"):
            s = result[kind][what]
            lines.append(f"{kind[:3]} {what[:-2]:<8}{s['p50']:>8.3f}{s['p99']:>8.3f}{s['max']:>8.3f}")
    for kind in ("revocation", "deletion"):
        if "served_effective_s" in result[kind]:
            s = result[kind]["served_effective_s"]
            n = result[kind]["served_measured"]
            row = f"{s['p50']:>8.3f}{s['p99']:>8.3f}{s['max']:>8.3f}"
            lines.append(f"{kind[:3]} served  {row}  (serve's own ask, {n} events)")
    counts = result["counts"]
    lines.append(
        f"documents backlog: {counts['documents_backlog_when_events_started']} when the events began,"
        f" {counts['documents_backlog_when_all_converged']} when the last converged"
        f" ({counts.get('backlog_drained_per_s', 0)} documents/s over {counts.get('events_phase_s', 0)} s;"
        f" {counts.get('backlog_drained_per_s_while_publishing', 0)} documents/s over the"
        f" {counts.get('publishing_s', 0)} s the events were published)"
    )
    lines.append(f"goals: {result['goals']}")
    if "load_average" in result:
        lines.append(
            f"background load: {result.get('background_load', 0)} busy processes; load average (1/5/15 min)"
            f" {result['load_average']['start']} at start, {result['load_average']['end']} at end"
        )
    by_copy = result.get("worker_records", {}).get("by_copy", {})
    if by_copy:
        lines.append("worker's own records (p50/p99 s from publish):")
        for copy, s in by_copy.items():
            if "/" not in copy:
                lines.append(f"  {copy:<16}{s['p50']:>8.3f}{s['p99']:>8.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=["cluster", "embedded"], required=True)
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--revocations", type=int, default=200)
    parser.add_argument("--deletions", type=int, default=200)
    parser.add_argument("--pace-ms", type=int, default=50)
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument(
        "--probers", type=int, default=0, help="threads querying for pending events (default: 16 cluster, 6 embedded)"
    )
    parser.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="run N busy-loop processes of its own for the whole run (killed at the end)",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--timeline", type=Path, default=None, help="also write each event's publish time and lags here (JSON)"
    )
    args = parser.parse_args(argv)
    factory: Callable[[Path], Any] = Cluster if args.profile == "cluster" else Embedded
    load_at_start = loadavg()
    with (
        tempfile.TemporaryDirectory(prefix="ragsync-propagation-") as tmp,
        BackgroundLoad(args.background_load) as load,
    ):
        runner = factory(Path(tmp))
        try:
            result = run(runner, args, load)
        finally:
            runner.close()
        load_at_end = loadavg()  # before the busy loops stop
    result["load_average"] = {"start": load_at_start, "busy_loops_started": load.load_at_start, "end": load_at_end}
    suffix = f"-load{args.background_load}" if args.background_load else ""
    out = args.out or RESULTS / f"propagation-{args.profile}{suffix}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

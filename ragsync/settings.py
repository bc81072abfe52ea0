"""Settings from the environment (RAGSYNC_*) and an optional TOML file (RAGSYNC_CONFIG or ./ragsync.toml).

Environment variables win over the file, the file over defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource


def _default_model_path() -> Path | None:
    """The offline MiniLM export shipped beside the checkout, when there is one."""
    for candidate in (
        Path("../shared/models/all-MiniLM-L6-v2-onnx"),
        Path(__file__).parents[2] / "shared/models/all-MiniLM-L6-v2-onnx",
    ):
        if (candidate / "model.onnx").is_file():
            return candidate.resolve()
    return None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAGSYNC_", extra="ignore")

    profile: Literal["embedded", "cluster"] = "embedded"
    home: Path = Path(".ragsync")
    session_secret: str = ""
    webhook_secret: str = ""

    embed_model_path: Path | None = Field(default_factory=_default_model_path)
    embed_model_name: str = "sentence-transformers/all-MiniLM-L6-v2"

    chunk_max_chars: int = 1000
    top_k: int = 8
    candidates: int = 50
    bm25_floor: float = 0.0
    dense_floor: float = 0.30
    rrf_k: int = 60
    cache_ttl_s: float = 60.0
    max_searches: int = 3
    abstain_when_first_search_empty: bool = True
    revocation_bound_s: float = 30.0

    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_topic_prefix: str = "ragsync."
    kafka_partitions: int = 3
    es_url: str = "http://127.0.0.1:9200"
    es_index_prefix: str = "ragsync"
    es_bm25_k1: float = 1.2
    es_bm25_b: float = 0.75
    qdrant_url: str | None = None
    qdrant_path: Path | None = None
    qdrant_collection: str = "ragsync_passages"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_namespace: str = "ragsync"
    model: Literal["extractive", "anthropic"] = "extractive"
    anthropic_model: str = "claude-sonnet-4-5"
    anthropic_base_url: str | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = Path(os.environ.get("RAGSYNC_CONFIG", "ragsync.toml"))
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    def secret(self) -> str:
        """The session secret; the embedded profile makes one per home so tokens survive restarts."""
        if self.session_secret:
            return self.session_secret
        path = self.home / "session.secret"
        if not path.exists():
            import secrets

            self.home.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

"""A folder of Markdown, HTML and text files as a source; access comes from `.ragsync-acl.toml` manifests.

    # acme/.ragsync-acl.toml
    tenant = "acme"
    read = ["group:staff"]

    [files."salaries.md"]          # relative to this manifest's folder
    read = ["group:hr", "user:ceo"]

Subfolders inherit; for each file the nearest manifest that says anything about its readers wins
(its own `[files]` entry first, then its `read`). `tenant` is inherited independently of `read`,
except that a manifest which switches to a *different* tenant stops read inheritance: group names
belong to a tenant, so "group:staff" of one tenant must never become readers in another. Anything
that cannot be resolved fails closed: no tenant or a broken manifest means the file is not emitted
(and the error is reported); `read = []` means nobody reads.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from connectors.base import ContentType, SourceDocument
from schemas.events import ACL_ENTRY_PATTERN

MANIFEST_NAME = ".ragsync-acl.toml"
EXTENSIONS: dict[str, ContentType] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".txt": "text",
}
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

_ACL_ENTRY = re.compile(ACL_ENTRY_PATTERN)


def _check_entries(entries: tuple[str, ...]) -> tuple[str, ...]:
    for entry in entries:
        if not _ACL_ENTRY.match(entry):
            raise ValueError(f"invalid ACL entry {entry!r} (expected 'group:<name>' or 'user:<id>')")
    return tuple(sorted(set(entries)))


class FileRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    read: tuple[str, ...]

    @field_validator("read")
    @classmethod
    def _read_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_entries(value)


class Manifest(BaseModel):
    """Strict on purpose: a typo such as `reads = [...]` must be an error, not an open folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str | None = Field(default=None, pattern=TENANT_PATTERN)
    read: tuple[str, ...] | None = None
    files: dict[str, FileRule] = {}

    @field_validator("read")
    @classmethod
    def _read_entries(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else _check_entries(value)

    @field_validator("files")
    @classmethod
    def _relative_names(cls, value: dict[str, FileRule]) -> dict[str, FileRule]:
        out: dict[str, FileRule] = {}
        for name, rule in value.items():
            path = PurePosixPath(name)
            if path.is_absolute() or ".." in path.parts or not path.parts:
                raise ValueError(f"file name {name!r} must be relative to the manifest's folder")
            out[str(path)] = rule
        return out


def format_validation_error(exc: ValidationError) -> str:
    messages = []
    for error in exc.errors():
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"]).lstrip(".")
        message = str(error["msg"]).removeprefix("Value error, ")
        messages.append(f"{where}: {message}" if where else message)
    return "; ".join(messages)


def parse_manifest(text: str | bytes, where: str) -> Manifest:
    """A manifest's text (bytes are UTF-8) from any tree, e.g. a git blob; ValueError names `where`."""
    try:
        data: dict[str, Any] = tomllib.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
        return Manifest.model_validate(data)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{where}: invalid ACL manifest: {exc}") from exc
    except ValidationError as exc:
        raise ValueError(f"{where}: invalid ACL manifest: {format_validation_error(exc)}") from exc


def load_manifest(path: Path) -> Manifest:
    """Raises ValueError with a message that names the manifest."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ACL manifest: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: invalid ACL manifest: {exc}") from exc
    return parse_manifest(text, str(path))


Chain = Sequence[tuple[str, Manifest]]  # (folder relative to root, "" for the root; its manifest), root first


def resolve_access(chain: Chain, doc_id: str) -> tuple[str | None, tuple[str, ...]]:
    """Tenant and ACL of a document from the manifests above it (nearest last)."""
    tenant = next((m.tenant for _, m in reversed(chain) if m.tenant), None)
    for i in range(len(chain) - 1, -1, -1):
        folder, manifest = chain[i]
        name = doc_id[len(folder) + 1 :] if folder else doc_id
        if name in manifest.files:
            return tenant, manifest.files[name].read
        if manifest.read is not None:
            return tenant, manifest.read
        above = next((m.tenant for _, m in reversed(chain[:i]) if m.tenant), None)
        if manifest.tenant is not None and above is not None and manifest.tenant != above:
            break
    return tenant, ()


def manifest_chain(manifests: Mapping[str, Manifest], doc_id: str) -> Chain:
    """The chain for `resolve_access` in a tree known as a flat listing (a git tree, not a folder walk).

    `manifests` maps each folder that has one ("" for the root) to its manifest; the chain is the
    manifests of the document's ancestor folders, root first, exactly what the drive walk collects.
    """
    parts = doc_id.split("/")[:-1]
    folders = ["", *("/".join(parts[: i + 1]) for i in range(len(parts)))]
    return [(folder, manifests[folder]) for folder in folders if folder in manifests]


@dataclass
class _Listing:
    manifest: Manifest | None = None
    files: list[tuple[str, os.stat_result]] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    broken: bool = False


def _list_dir(path: Path) -> _Listing:
    """One folder, sorted; blocking, so it runs in a worker thread."""
    listing = _Listing()
    try:
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        listing.errors.append(f"{path}: cannot list folder: {exc.strerror or exc}")
        listing.broken = True
        return listing
    for entry in entries:
        if entry.name == MANIFEST_NAME:
            try:
                listing.manifest = load_manifest(Path(entry.path))
            except ValueError as exc:
                listing.errors.append(str(exc))
                listing.broken = True
                return listing
        elif entry.name.startswith("."):
            continue
        elif entry.is_dir(follow_symlinks=False):
            listing.dirs.append(entry.name)
        elif Path(entry.name).suffix.lower() in EXTENSIONS:
            try:
                st = os.stat(entry.path)
            except OSError as exc:
                listing.errors.append(f"{entry.path}: cannot read: {exc.strerror or exc}")
                continue
            if stat.S_ISREG(st.st_mode):
                listing.files.append((entry.name, st))
            elif not stat.S_ISDIR(st.st_mode):  # symlinked folders are not followed (loops)
                listing.errors.append(f"{entry.path}: cannot read: not a regular file")
    return listing


def _reader(path: Path) -> Callable[[], Awaitable[bytes]]:
    async def fetch() -> bytes:
        return await asyncio.to_thread(path.read_bytes)

    return fetch


class DriveConnector:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.name = f"drive:{self.root}"
        self._errors: list[str] = []

    @property
    def errors(self) -> list[str]:
        return list(self._errors)

    async def documents(self) -> AsyncIterator[SourceDocument]:
        self._errors = []
        if not self.root.is_dir():
            self._errors.append(f"{self.root}: not a folder")
            return
        async for doc in self._walk(self.root, "", ()):
            yield doc

    async def _walk(self, folder: Path, rel: str, chain: Chain) -> AsyncIterator[SourceDocument]:
        listing = await asyncio.to_thread(_list_dir, folder)
        self._errors.extend(listing.errors)
        if listing.broken:
            return  # fail closed: nothing below a manifest we cannot read is emitted
        if listing.manifest is not None:
            chain = (*chain, (rel, listing.manifest))
        stats = dict(listing.files)
        for name in sorted([*stats, *listing.dirs]):
            child_rel = f"{rel}/{name}" if rel else name
            if name in stats:
                doc = self._document(folder / name, child_rel, stats[name], chain)
                if doc is not None:
                    yield doc
            else:
                async for doc in self._walk(folder / name, child_rel, chain):
                    yield doc

    def _document(self, path: Path, doc_id: str, st: os.stat_result, chain: Chain) -> SourceDocument | None:
        tenant, acl = resolve_access(chain, doc_id)
        if tenant is None:
            self._errors.append(f"{path}: no tenant: no {MANIFEST_NAME} in this folder or above sets `tenant`")
            return None
        return SourceDocument(
            doc_id=doc_id,
            tenant=tenant,
            acl=acl,
            title=path.stem,
            content_type=EXTENSIONS[path.suffix.lower()],
            source_url=path.as_uri(),
            fingerprint=f"{st.st_mtime_ns}-{st.st_size}",
            fetch=_reader(path),
        )

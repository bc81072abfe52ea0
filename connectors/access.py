"""ACL manifests (`.ragsync-acl.toml`) and how a tree of them gives each document its readers.

Shared by every tree-shaped source (a drive folder, a git tree), so both fail closed the same way.

    tenant = "acme"
    read = ["group:staff"]

    [files."salaries.md"]          # a name relative to this manifest's folder ...
    read = ["group:hr", "user:ceo"]

    [files."board/*.md"]           # ... or a glob (fnmatch, one path segment per "/")
    read = ["group:board"]

Rules (issue 8 item 4, each chosen to fail closed):
- Nearest manifest wins: a document's own `[files]` rule first, then `read`, walking up; a switch
  to another tenant stops read inheritance (group names belong to a tenant).
- Names are compared after NFC normalisation on both sides, so a key typed on one system matches a
  file named on another (macOS writes NFD). Matching is exact otherwise: case matters.
- A key that equals a document name is literal; any other key containing `*`, `?` or `[` is a glob
  (`fnmatch` per segment: `*` never crosses "/"; no `**`). A literal name wins over globs; two globs
  with different readers for one document are an error (never "the wider one").
- A key that matches no document is an error naming the key: a typo (`Salaries.md`), a glob taken
  literally, or a restricted file renamed must never leave the file on the folder's wider `read`.
- A manifest that cannot be read (syntax error, unknown key, invalid entry, a dangling or
  ambiguous rule) *locks* every document below its folder: readable by nobody (an ACL event with
  `[]` for whatever is already indexed) until it is fixed. Never "keep the previous ACL": a
  manifest edited to revoke someone and broken by the same edit must not leave that person reading.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.events import ACL_ENTRY_PATTERN

MANIFEST_NAME = ".ragsync-acl.toml"
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_GLOB_CHARS = frozenset("*?[")
_ACL_ENTRY = re.compile(ACL_ENTRY_PATTERN)


def nfc(name: str) -> str:
    return unicodedata.normalize("NFC", name)


def _check_entries(entries: tuple[str, ...]) -> tuple[str, ...]:
    for entry in entries:
        if not _ACL_ENTRY.fullmatch(entry):  # not .match: its '$' also matches before a final newline
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
    url_base: str | None = Field(default=None, pattern=r"^[a-zA-Z][a-zA-Z0-9+.-]*://\S+$")
    """Root manifest only: where users open the files (`url_base` + the document's path)."""

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
            if path.is_absolute() or ".." in path.parts or not path.parts or "**" in name:
                raise ValueError(f"file name {name!r} must be relative to the manifest's folder (no '..', no '**')")
            key = nfc(str(path))
            if key in out:
                raise ValueError(f"file name {name!r} is given twice (names are compared in Unicode NFC form)")
            out[key] = rule
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


Chain = Sequence[tuple[str, Manifest]]  # (folder relative to root, "" for the root; its manifest), root first


def _is_glob(key: str) -> bool:
    return any(c in _GLOB_CHARS for c in key)


def _glob_match(pattern: str, name: str) -> bool:
    """fnmatch per path segment, so `hr/*.md` never reaches into `hr/old/x.md`."""
    p_parts, n_parts = pattern.split("/"), name.split("/")
    return len(p_parts) == len(n_parts) and all(fnmatchcase(n, p) for p, n in zip(p_parts, n_parts, strict=True))


def file_rule(manifest: Manifest, name: str) -> tuple[str, ...] | None:
    """The readers a manifest's `[files]` gives `name` (relative to its folder), or None.

    Raises ValueError when globs disagree: two rules, two meanings, and no safe way to pick one.
    """
    key = nfc(name)
    if key in manifest.files:
        return manifest.files[key].read
    matches = {pattern: rule.read for pattern, rule in manifest.files.items() if _is_glob(pattern)}
    hits = {pattern: read for pattern, read in matches.items() if _glob_match(pattern, key)}
    if len(set(hits.values())) > 1:
        raise ValueError(f"[files] patterns {sorted(hits)} all match {name!r} with different readers")
    return next(iter(hits.values()), None)


def resolve_access(chain: Chain, doc_id: str) -> tuple[str | None, tuple[str, ...]]:
    """Tenant and ACL of a document from the manifests above it (nearest last)."""
    tenant = next((m.tenant for _, m in reversed(chain) if m.tenant), None)
    for i in range(len(chain) - 1, -1, -1):
        folder, manifest = chain[i]
        name = doc_id[len(folder) + 1 :] if folder else doc_id
        rule = file_rule(manifest, name)
        if rule is not None:
            return tenant, rule
        if manifest.read is not None:
            return tenant, manifest.read
        above = next((m.tenant for _, m in reversed(chain[:i]) if m.tenant), None)
        if manifest.tenant is not None and above is not None and manifest.tenant != above:
            break
    return tenant, ()


def manifest_chain(manifests: Mapping[str, Manifest], doc_id: str) -> Chain:
    """The chain for `resolve_access` in a tree known as a flat listing: the manifests of the
    document's ancestor folders ("" for the root), root first."""
    parts = doc_id.split("/")[:-1]
    folders = ["", *("/".join(parts[: i + 1]) for i in range(len(parts)))]
    return [(folder, manifests[folder]) for folder in folders if folder in manifests]


def _under(folder: str, doc_id: str) -> bool:
    return folder == "" or doc_id.startswith(folder + "/")


@dataclass(frozen=True, slots=True)
class Access:
    tenant: str | None  # None: no manifest above sets one
    acl: tuple[str, ...]
    locked: bool = False  # under a manifest that cannot be read: readable by nobody, content not read


def resolve_tree(
    manifests: Mapping[str, Manifest],
    broken: Mapping[str, str],
    doc_ids: Sequence[str],
    where: Mapping[str, str],
) -> tuple[dict[str, Access], list[str], tuple[str, ...]]:
    """Access for every document of a tree, the errors that locked some of it, and the locked folders.

    `manifests` and `broken` map folders ("" for the root) to their manifest or to the error that
    made it unreadable; `where` names each manifest in messages. Pure: the whole listing is known
    first, because a `[files]` key may name a file several folders down.
    """
    errors: list[str] = []
    locked = dict(broken)
    for folder, manifest in manifests.items():
        if folder and manifest.url_base is not None:
            errors.append(f"{where.get(folder, folder)}: url_base is only read from the root manifest")
            locked.setdefault(folder, "url_base below the root")
    ids = [nfc(d) for d in doc_ids]
    for folder, manifest in manifests.items():
        names = [d[len(folder) + 1 :] if folder else d for d in ids if _under(folder, d)]
        dangling = [
            key
            for key in manifest.files
            if key not in names and not (_is_glob(key) and any(_glob_match(key, n) for n in names))
        ]
        for key in dangling:
            hint = next((n for n in names if n.casefold() == key.casefold()), None)
            more = f"; did you mean {hint!r}?" if hint else " (a renamed file? a key must name a document exactly)"
            errors.append(f"{where.get(folder, folder)}: [files] {key!r} matches no document{more}")
        if dangling:
            locked.setdefault(folder, "dangling [files] rule")
    access: dict[str, Access] = {}
    for doc_id, key in zip(doc_ids, ids, strict=True):
        chain = manifest_chain(manifests, key)
        if any(_under(folder, key) for folder in locked):
            tenant = next((m.tenant for _, m in reversed(chain) if m.tenant), None)
            access[doc_id] = Access(tenant, (), locked=True)
            continue
        try:
            tenant, acl = resolve_access(chain, key)
        except ValueError as exc:
            errors.append(f"{doc_id}: {exc}")
            access[doc_id] = Access(None, (), locked=True)
            continue
        access[doc_id] = Access(tenant, acl)
    return access, errors, tuple(sorted(locked))

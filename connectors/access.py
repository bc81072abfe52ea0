"""ACL manifests (`.ragsync-acl.toml`) and how a tree of them gives each document its tenant and readers.

Shared by every tree-shaped source (a drive folder, a git tree), so both fail closed the same way.

    tenant = "acme"                # only a tenant declared for the source (`--tenant`, `tenants` in [[sources]])
    read = ["group:staff"]         # this folder and everything below it

    [files."salaries.md"]          # a name relative to this manifest's folder ...
    read = ["group:hr", "user:ceo"]

    [files."board/*.md"]           # ... or a glob (fnmatch, one path segment per "/")
    read = ["group:board"]

    [folders."hr"]                 # every document below hr/, at any depth
    read = ["group:hr", "group:hr-leads"]

Manifests narrow, never widen (issue 18 item 2). Whoever may write a folder may write a manifest in
it, so no manifest may give away what a manifest above it withholds:
- A manifest's *rule* for a document is its own most specific statement about it: a literal
  `[files]` key, else the `[files]` globs that match, else the deepest `[folders]` key above the
  document, else `read`, else nothing (the manifest says nothing; `read = []` says "nobody").
- A document's readers are the intersection of the rules of every manifest above it, root first:
  every entry must be granted by each of them, so a `[files]` or `[folders]` rule above always
  holds. A document no manifest has a rule for is readable by nobody. A manifest that says nothing
  about a document (no `read`, no key for it) leaves it to the manifests below, which may then grant
  it (it was readable by nobody, not withheld by a rule); `read = []` above forbids any grant below.
- A rule that grants an entry the rules above it withhold, for any document below it, is its
  folder's error: every document below that folder is locked (reported by name), never silently
  kept at the old or the intersected readers. Entries are compared as written: `group:hr` below
  `group:staff` is a widening, because a member of hr who is not staff would gain the document.
- A folder that needs readers its parent does not grant gets them from the parent's manifest, whose
  writer decides for the whole folder: `[folders."hr"]` (or `[files."hr/x.md"]`). Within one
  manifest the specific rule replaces `read`, as the same writer stated both. The folder's own
  manifest may then narrow that further, never widen it.

Tenants (the same issue): a manifest may name only a tenant declared for the source (`resolve_tree`'s
`tenants`), and tenants never switch: below a manifest that names a tenant, a manifest may only
repeat it. Anything else is its folder's error (locked, reported), even a declared tenant: in a
source holding acme and globex, a writer of `acme/shared/` must not move acme's files into globex,
or inject content into it. Tenants are named at the top of disjoint subtrees (`acme/`, `globex/`).
A document under no tenant is an error and locked, so a copy indexed earlier is readable by nobody.

Names (issue 8 item 4, each chosen to fail closed):
- Names are compared after NFC normalisation on both sides, manifest folders included, so a key
  typed on one system matches a file named on another (macOS writes NFD). Matching is exact
  otherwise: case matters. Two folders whose names differ only in Unicode form are locked.
- A `[files]` key that equals a document name is literal; any other key containing `*`, `?` or `[`
  is a glob (`fnmatch` per segment: `*` never crosses "/"; no `**`). A literal name wins over globs;
  two globs with different readers for one document lock that document. `[folders]` keys are
  literal folder names.
- A `[files]` key that matches no document, or a `[folders]` key naming no folder that holds a
  document or a manifest, is an error naming the key: a typo (`Salaries.md`), a glob taken
  literally, or a restricted file or folder renamed must never leave it on the wider `read`.
- A manifest that cannot be read (syntax error, unknown key, invalid entry, a link, a name that is
  almost `.ragsync-acl.toml`: `manifest_lookalike`) *locks* every document below its folder:
  readable by nobody (an ACL event with `[]` for whatever is already indexed) until it is fixed.
  Never "keep the previous ACL": a manifest edited to revoke someone and broken by the same edit
  must not leave that person reading.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Collection, Mapping, Sequence
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
_TENANT = re.compile(TENANT_PATTERN)
_WIDEN_HINT = "grant more in the parent's manifest: [folders] or [files]"


def nfc(name: str) -> str:
    return unicodedata.normalize("NFC", name)


def manifest_lookalike(name: str) -> bool:
    """A file name that is not exactly MANIFEST_NAME but was surely meant as one (`.RAGSYNC-ACL.toml`,
    `ragsync-acl.toml`, `.ragsync_acl.toml`, full-width or spaced forms). Ignoring it would drop the
    narrowing it states (on a case-insensitive disk it *is* the manifest), so its folder is locked."""
    if name == MANIFEST_NAME:
        return False
    folded = "".join(unicodedata.normalize("NFKC", name).casefold().split()).replace("_", "-")
    return folded.lstrip(".") == MANIFEST_NAME.lstrip(".")


def check_tenants(tenants: Collection[str]) -> frozenset[str]:
    """The tenants a source declares, as a set; ValueError names a malformed one."""
    for tenant in tenants:
        if not isinstance(tenant, str) or not _TENANT.match(tenant):
            raise ValueError(f"invalid tenant {tenant!r} (expected {TENANT_PATTERN})")
    return frozenset(tenants)


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


def _relative_keys(value: dict[str, FileRule], what: str) -> dict[str, FileRule]:
    out: dict[str, FileRule] = {}
    for name, rule in value.items():
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or not path.parts or "**" in name:
            raise ValueError(f"{what} {name!r} must be relative to the manifest's folder (no '..', no '**')")
        key = nfc(str(path))
        if key in out:
            raise ValueError(f"{what} {name!r} is given twice (names are compared in Unicode NFC form)")
        out[key] = rule
    return out


class Manifest(BaseModel):
    """Strict on purpose: a typo such as `reads = [...]` must be an error, not an open folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str | None = Field(default=None, pattern=TENANT_PATTERN)
    read: tuple[str, ...] | None = None
    files: dict[str, FileRule] = {}
    folders: dict[str, FileRule] = {}
    """Readers of every document below a subfolder: how a parent grants a folder more than its own `read`."""
    url_base: str | None = Field(default=None, pattern=r"^[a-zA-Z][a-zA-Z0-9+.-]*://\S+$")
    """Root manifest only: where users open the files (`url_base` + the document's path)."""

    @field_validator("read")
    @classmethod
    def _read_entries(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else _check_entries(value)

    @field_validator("files")
    @classmethod
    def _file_names(cls, value: dict[str, FileRule]) -> dict[str, FileRule]:
        return _relative_keys(value, "file name")

    @field_validator("folders")
    @classmethod
    def _folder_names(cls, value: dict[str, FileRule]) -> dict[str, FileRule]:
        return _relative_keys(value, "folder name")


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


def manifest_rule(manifest: Manifest, name: str) -> tuple[str, ...] | None:
    """The manifest's most specific statement about `name` (relative to its folder): `[files]`, else
    the deepest `[folders]` key above it, else `read`; None when it says nothing about it."""
    rule = file_rule(manifest, name)
    if rule is not None:
        return rule
    parts = nfc(name).split("/")[:-1]
    for depth in range(len(parts), 0, -1):
        folder = manifest.folders.get("/".join(parts[:depth]))
        if folder is not None:
            return folder.read
    return manifest.read


class ChainError(ValueError):
    """A manifest of the chain widens what is above it, or switches tenant: `folder` is to be locked."""

    def __init__(self, folder: str, message: str, *, widening: bool) -> None:
        super().__init__(message)
        self.folder = folder
        self.widening = widening  # else a switch of tenant


def _relative(folder: str, doc_id: str) -> str:
    return doc_id[len(folder) + 1 :] if folder else doc_id


def resolve_access(chain: Chain, doc_id: str) -> tuple[str | None, tuple[str, ...]]:
    """Tenant and readers of a document from the manifests above it (root first): the intersection
    of their rules. Raises ChainError naming the first manifest that widens or switches tenant, and
    ValueError for `[files]` globs that disagree."""
    tenant: str | None = None
    readers: frozenset[str] | None = None
    for folder, manifest in chain:
        if manifest.tenant is not None:
            if tenant is not None and manifest.tenant != tenant:
                raise ChainError(
                    folder, f"tenant {manifest.tenant!r} differs from {tenant!r} named above it", widening=False
                )
            tenant = manifest.tenant
        rule = manifest_rule(manifest, _relative(folder, doc_id))
        if rule is None:
            continue
        if readers is not None and not readers.issuperset(rule):
            extra = ", ".join(sorted(set(rule) - readers))
            allowed = ", ".join(sorted(readers)) or "nobody"
            message = f"grants {extra} to {doc_id}, which the manifests above allow only {allowed}"
            raise ChainError(folder, message, widening=True)
        readers = frozenset(rule) if readers is None else readers & frozenset(rule)
    return tenant, tuple(sorted(readers or ()))


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


def _nfc_keys(mapping: Mapping[str, Any], clashes: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if nfc(key) in out:
            clashes.add(nfc(key))
        out[nfc(key)] = value
    return out


def _folder_clashes(doc_ids: Sequence[str], folders: Collection[str]) -> set[str]:
    """Folders (NFC) that stand for two folders of the tree, named alike but in different Unicode forms."""
    seen: dict[str, str] = {}
    clashes: set[str] = set()
    every = set(folders)
    for doc_id in doc_ids:
        parts = doc_id.split("/")[:-1]
        every.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for folder in every:
        if seen.setdefault(nfc(folder), folder) != folder:
            clashes.add(nfc(folder))
    return clashes


def _dangling(manifest: Manifest, names: Sequence[str], subfolders: Collection[str]) -> list[str]:
    """`[files]` keys that match no document below the manifest and `[folders]` keys that name no
    folder holding a document or a manifest (an emptied folder keeps its rule), with a hint each."""
    problems = []
    files = set(names)
    folders = {"/".join(n.split("/")[: i + 1]) for n in [*names, *subfolders] for i in range(n.count("/") + 1)}
    folders -= files
    keys = [("[files]", k, files) for k in manifest.files] + [("[folders]", k, folders) for k in manifest.folders]
    for table, key, candidates in keys:
        if key in candidates or (table == "[files]" and _is_glob(key) and any(_glob_match(key, n) for n in names)):
            continue
        hint = next((n for n in sorted(candidates) if n.casefold() == key.casefold()), None)
        more = f"; did you mean {hint!r}?" if hint else " (a renamed file? a key must name a document exactly)"
        if table == "[folders]" and not hint:
            more = " (a renamed folder? a key must name a folder exactly)"
        problems.append(f"{table} {key!r} matches {'no document' if table == '[files]' else 'no folder'}{more}")
    return problems


def resolve_tree(
    manifests: Mapping[str, Manifest],
    broken: Mapping[str, str],
    doc_ids: Sequence[str],
    where: Mapping[str, str],
    tenants: Collection[str],
) -> tuple[dict[str, Access], list[str], tuple[str, ...]]:
    """Access for every document of a tree, the errors that locked some of it, and the locked folders.

    `manifests` and `broken` map folders ("" for the root) to their manifest or to the error that
    made it unreadable; `where` names each manifest in messages; `tenants` are the tenants the
    source declares (no other may be named). Pure: the whole listing is known first, because a
    `[files]` key may name a file several folders down, and a widening anywhere below a folder
    locks all of it.
    """
    errors: list[str] = []
    clashes: set[str] = set()
    named = _nfc_keys(where, set())
    found: dict[str, Manifest] = _nfc_keys(manifests, clashes)
    locked: dict[str, str] = _nfc_keys(broken, clashes)
    clashes |= _folder_clashes(doc_ids, [*manifests, *broken]) & (set(found) | set(locked) | clashes)

    def lock(folder: str, message: str) -> None:
        errors.append(f"{named.get(folder, folder or 'the root')}: {message}; every document below it is locked")
        locked.setdefault(folder, message)

    for folder in sorted(clashes):
        lock(folder, "two folders have this name in different Unicode forms (NFC/NFD) and one holds a manifest")
    declared = check_tenants(tenants)
    for folder, manifest in sorted(found.items()):
        if folder and manifest.url_base is not None:
            lock(folder, "url_base is only read from the root manifest")
        if manifest.tenant is not None and manifest.tenant not in declared:
            listed = ", ".join(sorted(declared)) or "none"
            lock(
                folder,
                f"tenant {manifest.tenant!r} is not declared for this source (declared: {listed}; "
                "`ragsync sync --tenant`, or `tenants` in [[sources]])",
            )
        if folder and manifest.tenant is not None:
            above = next((m.tenant for f, m in manifest_chain(found, folder + "/x") if f != folder and m.tenant), None)
            if above is not None and manifest.tenant != above:
                lock(folder, f"tenant {manifest.tenant!r} differs from {above!r} named above it: tenants never switch")
    ids = [nfc(d) for d in doc_ids]
    homes = {*found, *locked}  # folders holding a manifest
    for folder, manifest in sorted(found.items()):
        below = [_relative(folder, f) for f in homes if f != folder and _under(folder, f)]
        for problem in _dangling(manifest, [_relative(folder, d) for d in ids if _under(folder, d)], below):
            lock(folder, problem)
    alone: dict[str, str] = {}  # documents locked on their own: [files] globs that disagree
    widening: set[str] = set()
    for key in ids:  # every document, locked or not: each widening is reported and locks its folder
        try:
            resolve_access(manifest_chain(found, key), key)
        except ChainError as exc:
            if exc.widening and exc.folder not in widening:  # a tenant switch was reported above
                widening.add(exc.folder)
                lock(exc.folder, f"{exc}; a manifest may only narrow what is above it ({_WIDEN_HINT})")
        except ValueError as exc:
            alone[key] = str(exc)
    access: dict[str, Access] = {}
    for doc_id, key in zip(doc_ids, ids, strict=True):
        chain = manifest_chain(found, key)
        tenant = next((m.tenant for _, m in chain if m.tenant), None)
        if any(_under(folder, key) for folder in locked) or key in alone:
            if key in alone:
                errors.append(f"{doc_id}: {alone[key]}")
            access[doc_id] = Access(tenant, (), locked=True)
            continue
        tenant, acl = resolve_access(chain, key)
        access[doc_id] = Access(tenant, acl)
    # As the tree names them too, for whoever matches them against stored (not normalised) IDs.
    raw = {*manifests, *broken, *(d.rsplit("/", 1)[0] for d in doc_ids if "/" in d)}
    raw = {"/".join(f.split("/")[: i + 1]) for f in raw for i in range(f.count("/") + 1)}
    return access, errors, tuple(sorted(set(locked) | {f for f in raw if nfc(f) in locked}))

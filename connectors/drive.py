"""A folder of documents (Markdown, HTML, text, reST, CSV/TSV, PDF, DOCX) as a source.

Access comes from `.ragsync-acl.toml` manifests:

    # acme/.ragsync-acl.toml
    tenant = "acme"
    read = ["group:staff"]

    [files."salaries.md"]          # relative to this manifest's folder
    read = ["group:hr", "user:ceo"]

Manifest semantics live in connectors.access (shared with the git wiki): a manifest only narrows
what the manifests above it grant (a folder that needs more is granted it by its parent's manifest,
`[folders."hr"]`), a manifest may name only a tenant the source declares (`tenants`) and never
another tenant than the one above it, and whatever cannot be resolved fails closed: a broken
manifest, a widening, an undeclared or switched tenant, or a `[files]` key that matches no document
locks every document below its folder (readable by nobody until fixed, reported); a file under no
tenant is locked and reported; `read = []` means nobody.

With `permissions="posix"` (issue 19 item 5) the readers come from the files themselves instead
(connectors.posix: mode bits, owner, group, POSIX ACLs and the folders a reader must search through,
for every user of the system), the tenant is the single one the source declares, and a manifest
above a file can only narrow that: a reader must be admitted by both. A file whose permissions
cannot be read is locked (readable by nobody) and reported.

Never read (issue 8 item 1):
- Links. A symlink, to a file or a folder, is not a document: it is skipped and reported, and a file
  that a symlink replaces leaves the index like any removed file. Files are opened with O_NOFOLLOW
  and checked against the inode the listing saw, so a link or another file swapped in after the
  listing (a swapped parent folder too) is refused, not followed.
- The ragsync home (`refuse`, passed by the composition root): a root inside it or containing it
  is refused outright, and a hard link to one of its files is skipped.

Hidden files and folders (".git", ".DS_Store", drafts) are ignored without a report entry; every
other file that is not indexed is in `skipped` with its reason. `source_url` is `url_base` plus the
document's path when given (where users open the file), else the path relative to the root: never
the server's absolute path (item 10).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from connectors.access import (
    MANIFEST_NAME,
    TENANT_PATTERN,
    Access,
    Chain,
    FileRule,
    Manifest,
    check_tenants,
    format_validation_error,
    manifest_chain,
    manifest_lookalike,
    manifest_rule,
    nfc,
    parse_manifest,
    resolve_access,
    resolve_tree,
)
from connectors.base import ContentType, PassReport, Skipped, SourceDocument
from connectors.permissions import Directory, PrincipalMap, Translation, index_admits, principal_entries, translate

__all__ = [
    "DEFAULT_MAX_BYTES",
    "EXTENSIONS",
    "MANIFEST_NAME",
    "PERMISSIONS",
    "TENANT_PATTERN",
    "Chain",
    "DriveConnector",
    "FileRule",
    "Manifest",
    "document_url",
    "format_validation_error",
    "load_manifest",
    "manifest_chain",
    "parse_manifest",
    "resolve_access",
]
from schemas.events import SOURCE_NAME_PATTERN, source_name_from, valid_source_name

EXTENSIONS: dict[str, ContentType] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".txt": "text",
    ".rst": "rst",
    ".rest": "rst",
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".pdf": "pdf",
    ".docx": "docx",
}
"""What a drive may hold (connectors.formats reads each); any other file is reported as "unsupported type"."""
PERMISSIONS = ("manifests", "posix")
"""Where a drive's readers come from: its manifests alone, or the files' own POSIX permissions
(connectors.posix) narrowed by any manifest above them."""
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
"""Files above this are skipped as "too large" before they are read (a setting may raise it)."""


def load_manifest(path: Path) -> Manifest:
    """Raises ValueError with a message that names the manifest."""
    try:
        data = _read_regular(path)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ACL manifest: {exc.strerror or exc}") from exc
    return parse_manifest(data, str(path))


def document_url(url_base: str | None, doc_id: str) -> str:
    """Where a reader opens the document: `url_base` + its percent-encoded path, else the bare path."""
    if not url_base:
        return doc_id
    return f"{url_base.rstrip('/')}/{quote(doc_id, safe='/')}"


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_regular(path: Path, identity: tuple[int, int] | None = None, limit: int | None = None) -> bytes:
    """The bytes of a regular file that is not a link (and is the inode listed, when given)."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        if identity is not None and (st.st_dev, st.st_ino) != identity:
            raise OSError(f"{path}: replaced since it was listed (a link or another file): not read")
        if limit is not None and st.st_size > limit:
            raise OSError(f"{path}: grew past {limit} bytes since it was listed")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@dataclass
class _File:
    rel: str
    path: Path
    st: os.stat_result


@dataclass
class _Tree:
    files: list[_File] = field(default_factory=list)
    manifests: dict[str, Manifest] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _walk(root: Path, home_inodes: frozenset[tuple[int, int]], max_bytes: int) -> _Tree:
    """The whole listing, blocking (runs in a worker thread); nothing is followed through a link."""
    tree = _Tree()
    pending = [(root, "")]
    while pending:
        folder, rel = pending.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            tree.errors.append(f"{folder}: cannot list folder: {exc.strerror or exc}")
            tree.broken[rel] = "cannot list"
            continue
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name == MANIFEST_NAME:
                tree.where[rel] = entry.path
                try:
                    tree.manifests[rel] = load_manifest(Path(entry.path))
                except ValueError as exc:
                    tree.errors.append(str(exc))
                    tree.broken[rel] = str(exc)
                continue
            if manifest_lookalike(entry.name):
                problem = f"{entry.path}: not read as an ACL manifest: the name must be exactly {MANIFEST_NAME}"
                tree.errors.append(problem)
                tree.broken[rel] = problem
                tree.where.setdefault(rel, entry.path)
                continue
            if entry.name.startswith("."):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                tree.errors.append(f"{entry.path}: cannot read: {exc.strerror or exc}")
                continue
            if stat.S_ISLNK(st.st_mode):
                tree.skipped.append(Skipped(child, "symlink", "links are never followed"))
            elif stat.S_ISDIR(st.st_mode):
                pending.append((Path(entry.path), child))
            elif not stat.S_ISREG(st.st_mode):
                tree.skipped.append(Skipped(child, "not a file", "a device, socket or pipe"))
            elif (st.st_dev, st.st_ino) in home_inodes:
                tree.skipped.append(Skipped(child, "inside the ragsync home", "a hard link to a file of the home"))
            elif Path(entry.name).suffix.lower() not in EXTENSIONS:
                tree.skipped.append(Skipped(child, "unsupported type"))
            elif st.st_size > max_bytes:
                tree.skipped.append(Skipped(child, "too large", f"{st.st_size} bytes, limit {max_bytes}"))
            else:
                tree.files.append(_File(child, Path(entry.path), st))
    tree.files.sort(key=lambda f: f.rel)
    return tree


def _has_rule(manifests: dict[str, Manifest], rel: str) -> bool:
    """Whether a manifest above the file says something about it (else it leaves POSIX alone)."""
    found = {nfc(folder): manifest for folder, manifest in manifests.items()}
    key = nfc(rel)
    return any(
        manifest_rule(manifest, key[len(folder) + 1 :] if folder else key) is not None
        for folder, manifest in manifest_chain(found, key)
    )


def _narrowed_by(
    posix: Translation, manifest_acl: tuple[str, ...], directory: Directory, mapping: PrincipalMap
) -> Translation:
    """The readers both the file's permissions and the manifests above it admit (the intersection).

    A group stays a group only if the POSIX translation kept it and the manifest names it too, so
    nobody the manifest withholds gets in through it."""

    def posix_admits(user: str) -> bool:
        entry, groups = principal_entries(directory, mapping, user)
        return entry is not None and index_admits(posix.acl, entry, groups)

    def manifest_admits(user: str) -> bool:
        entry, groups = principal_entries(directory, mapping, user)
        return entry is not None and index_admits(manifest_acl, entry, groups)

    names = {g for gs in directory.groups_of.values() for g in gs}
    groups = [g for g in names if (e := mapping.group(g)) is not None and e in posix.acl and e in manifest_acl]
    both = translate(directory, mapping, lambda u: posix_admits(u) and manifest_admits(u), groups)
    withheld = sorted(u for u in directory.groups_of if posix_admits(u) and not manifest_admits(u))
    narrowed = list(posix.narrowed)
    if withheld:
        narrowed.append(f"a manifest above it withholds it from {', '.join(withheld)}")
    return Translation(both.acl, tuple(narrowed), posix.unmapped | both.unmapped)


def _inodes(folders: Sequence[Path]) -> frozenset[tuple[int, int]]:
    found: set[tuple[int, int]] = set()
    for folder in folders:
        for dirpath, _, names in os.walk(folder):
            for name in names:
                try:
                    st = os.stat(os.path.join(dirpath, name), follow_symlinks=False)
                except OSError:
                    continue
                found.add((st.st_dev, st.st_ino))
    return frozenset(found)


class DriveConnector(PassReport):
    """`tenants`: the only tenants its manifests may name (declared by whoever configures the source,
    never by a file in it); `refuse`: folders never read (the ragsync home); `url_base`: where users
    open the files (else the root manifest's `url_base`, else the path relative to the root)."""

    def __init__(
        self,
        root: Path,
        name: str | None = None,
        *,
        tenants: Collection[str],
        refuse: Sequence[Path] = (),
        url_base: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        permissions: str = "manifests",
        principals: PrincipalMap | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        # `name` namespaces the doc IDs (`<name>:<path>`); by default it is made from the folder's name.
        self.name = name or source_name_from(self.root.name, "drive")
        if not valid_source_name(self.name):
            raise ValueError(f"invalid source name {self.name!r} (expected {SOURCE_NAME_PATTERN})")
        self.location = f"drive:{self.root}"
        self.tenants = check_tenants(tenants)
        self.refuse = tuple(Path(p).resolve() for p in refuse)
        self.url_base = url_base
        self.max_bytes = max_bytes
        if permissions not in PERMISSIONS:
            raise ValueError(f"permissions {permissions!r}: expected one of {', '.join(PERMISSIONS)}")
        if permissions == "posix" and len(self.tenants) != 1:
            raise ValueError("a drive with POSIX permissions feeds exactly one tenant (its files name none)")
        self.permissions = permissions
        self.principals = principals or PrincipalMap()
        self._errors: list[str] = []
        self.locked_folders: tuple[str, ...] = ()  # SourceConnector.locked_folders: set by each pass
        self._skipped: list[Skipped] = []

    def refusal(self) -> str | None:
        """Why this root is never read (it is, or holds, the ragsync home), or None."""
        for home in self.refuse:
            if self.root == home or self.root.is_relative_to(home):
                return f"{self.root}: refusing to sync a folder inside the ragsync home {home}"
            if home.is_relative_to(self.root):
                return f"{self.root}: refusing to sync a folder that contains the ragsync home {home}"
        return None

    async def documents(self) -> AsyncIterator[SourceDocument]:
        self._errors, self._skipped = [], []
        refused = self.refusal()
        if refused is not None:
            self._errors.append(refused)
            return
        if not self.root.is_dir():
            self._errors.append(f"{self.root}: not a folder")
            return
        home_inodes = await asyncio.to_thread(_inodes, [h for h in self.refuse if h.is_dir()])
        tree = await asyncio.to_thread(_walk, self.root, home_inodes, self.max_bytes)
        self._errors.extend(tree.errors)
        self._skipped.extend(tree.skipped)
        access, errors, self.locked_folders = resolve_tree(
            tree.manifests, tree.broken, [f.rel for f in tree.files], tree.where, self.tenants
        )
        self._errors.extend(errors)
        root_manifest = tree.manifests.get("")
        url_base = self.url_base or (root_manifest.url_base if root_manifest is not None else None)
        posix = await self._posix(tree, access) if self.permissions == "posix" else {}
        for file in tree.files:
            granted = access[file.rel]
            narrowed: tuple[str, ...] = ()
            if self.permissions == "posix":
                granted, narrowed = posix[file.rel]
            if granted.tenant is None and not granted.locked:
                # Locked, not skipped: a copy indexed under a tenant before must not keep its readers.
                self._errors.append(f"{file.path}: no tenant: no {MANIFEST_NAME} in this folder or above sets `tenant`")
                granted = Access(None, (), locked=True)
            yield SourceDocument(
                doc_id=file.rel,
                tenant=granted.tenant or "",
                acl=granted.acl,
                title=file.path.stem,
                content_type=EXTENSIONS[file.path.suffix.lower()],
                source_url=document_url(url_base, file.rel),
                fingerprint=f"{file.st.st_mtime_ns}-{file.st.st_size}",
                fetch=self._reader(file),
                narrowed=narrowed,
                locked=granted.locked,
            )

    async def _posix(self, tree: _Tree, access: dict[str, Access]) -> dict[str, tuple[Access, tuple[str, ...]]]:
        """Each file's readers from its POSIX permissions, narrowed by the manifests above it, if any.

        The tenant is the one the source declares. A manifest may only narrow: a reader must be
        admitted by the file's permissions and by the manifests that have a rule for the file (as
        written); a file no manifest says anything about keeps its POSIX readers; a locked
        manifest locks as it does without POSIX; a file whose permissions cannot be read is locked."""
        from connectors.posix import posix_access, system_users

        users = await asyncio.to_thread(system_users)
        found = await asyncio.to_thread(posix_access, self.root, [f.rel for f in tree.files], self.principals, users)
        directory = users.directory()
        (tenant,) = self.tenants
        out: dict[str, tuple[Access, tuple[str, ...]]] = {}
        for file in tree.files:
            manifest = access[file.rel]
            if file.rel in found.unreadable:
                self._errors.append(f"{found.unreadable[file.rel]}: readable by nobody until it can be read")
                out[file.rel] = Access(tenant, (), locked=True), ()
            elif manifest.locked:
                out[file.rel] = manifest, ()
            else:
                translation = found.translations[file.rel]
                if _has_rule(tree.manifests, file.rel):
                    translation = _narrowed_by(translation, manifest.acl, directory, self.principals)
                out[file.rel] = Access(tenant, translation.acl), translation.narrowed
        return out

    def _reader(self, file: _File) -> Callable[[], Awaitable[bytes]]:
        identity = (file.st.st_dev, file.st.st_ino)

        async def fetch() -> bytes:
            return await asyncio.to_thread(_read_regular, file.path, identity, self.max_bytes)

        return fetch

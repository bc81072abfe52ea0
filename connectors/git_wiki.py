"""A git-backed wiki as a source: the tree at a ref is the listing, blob SHAs are the fingerprints.

    ragsync sync --git /srv/wiki.git --ref main --tenant acme

Everything is read from the object database, never from a work tree, so a bare mirror works and
uncommitted edits are invisible: what is indexed is exactly what was committed at the ref. One
`git ls-tree -r -z --full-tree` lists every page with its blob SHA; a blob SHA is the content's
identity, so an unchanged page is never read again, and content is fetched lazily with
`git cat-file blob` only for the pages the scanner decides it needs. The ref is resolved to a
commit once per listing, so the listing, the manifests and every fetch describe the same commit
even if the branch moves during a scan.

Access comes from `.ragsync-acl.toml` manifests committed in the tree, with exactly the drive
connector's semantics (connectors.access: manifests only narrow what is above them, only declared
`tenants` and never a switch of tenant, hidden files and folders are ignored, a page under no
tenant is locked and reported, a broken, widening or misnamed manifest or a `[files]` key matching
no page locks the pages below it: readable by nobody).
`subdir` is the root, like the drive connector's folder: doc IDs are relative to it
and manifests above it do not apply.

Decisions:
- `effective_from` is never taken from commit times: a commit records when someone edited a page,
  not when the rule in it applies (a policy merged today may take effect next quarter, a typo fix
  must not make an old policy "new"), and rebases rewrite commit times. Only a date stated in the
  content (front matter / <meta>) counts, read by the scanner as for every other source. It would
  also cost a `git log` walk per page.
- Symlinks and submodules are not pages: a symlink's blob is a path, and a submodule is another
  repository at a commit this tree only points to. A manifest that is not a regular file is broken.
- The ref is not part of the source name, so switching the synced branch emits only the differences
  (an upsert per page that differs, deletes for pages the new branch lacks).
- Doc IDs are `<name>:<path>`, the path relative to `subdir` as the drive's is relative to its
  folder, and `name` the source's namespace (default: the repository's name), so a wiki and a
  drive never share a document even when both hold the same path for one tenant.
- Any git failure (bad ref, missing subdir, unreadable manifest) goes to `errors`, which stops the
  scanner from deleting anything: a typo in `--ref` must never look like "every page was removed".
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from connectors.access import (
    MANIFEST_NAME,
    Access,
    Manifest,
    check_tenants,
    manifest_lookalike,
    parse_manifest,
    resolve_tree,
)
from connectors.base import PassReport, Skipped, SourceDocument
from connectors.drive import EXTENSIONS
from schemas.events import SOURCE_NAME_PATTERN, source_name_from, valid_source_name

DEFAULT_URL_TEMPLATE = "git+file://{repo}#{commit}:{path}"
"""`<commit>:<path>` is git's own object name, so `git show` opens exactly the version indexed."""

URL_FIELDS = ("repo", "ref", "commit", "path", "doc_id")

_REGULAR_MODES = (b"100644", b"100755")
_GIT_ENV = {
    "GIT_LITERAL_PATHSPECS": "1",  # a subdir such as "docs[1]" is a name, not a glob
    "GIT_TERMINAL_PROMPT": "0",  # never wait for a password on a scan
    "GIT_NO_LAZY_FETCH": "1",  # a partial clone must fail fast, not fetch from a remote mid-scan
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",  # stable error messages
}


def _is_manifest(name: str) -> bool:
    """The manifest, or a name almost like it (a broken manifest: connectors.access.manifest_lookalike)."""
    return name == MANIFEST_NAME or manifest_lookalike(name)


def _is_page(name: str) -> bool:
    return not name.startswith(".") and PurePosixPath(name).suffix.lower() in EXTENSIONS


class GitError(RuntimeError):
    """A git command failed; the message carries git's own explanation (`stderr`, may be empty)."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


@dataclass(frozen=True, slots=True)
class _Entry:
    path: str  # in the repository
    rel: str  # relative to subdir: the doc ID of a page, the folder key of a manifest
    mode: bytes
    sha: str


class GitWikiConnector(PassReport):
    """Pages of a git tree at `ref` (under `subdir`), with access from committed manifests.

    `tenants` are the only tenants its manifests may name (declared by whoever configures the source).
    `url_template` makes `source_url` point where readers can open the page, e.g.
    "https://wiki.example/{doc_id}"; placeholders: {repo} {ref} {commit} {path} {doc_id}, each
    percent-encoded (slashes kept).
    """

    def __init__(
        self,
        repo: Path,
        *,
        tenants: Collection[str],
        ref: str = "HEAD",
        subdir: str = "",
        name: str | None = None,
        url_template: str = DEFAULT_URL_TEMPLATE,
        timeout_s: float = 120.0,
    ) -> None:
        if not ref or ref.startswith("-") or any(c.isspace() or c == "\0" for c in ref):
            raise ValueError(f"invalid git ref {ref!r}")
        sub = PurePosixPath(subdir.strip("/") or ".")
        if sub.is_absolute() or ".." in sub.parts:
            raise ValueError(f"subdir {subdir!r} must be a folder inside the repository")
        try:
            url_template.format(**dict.fromkeys(URL_FIELDS, "x"))
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"invalid url_template {url_template!r}: placeholders are {URL_FIELDS}") from exc
        self.repo = Path(repo).resolve()
        self.ref = ref
        self.subdir = "" if str(sub) == "." else str(sub)
        self.url_template = url_template
        self.timeout_s = timeout_s
        # The namespace of the doc IDs (`<name>:<path>`); by default the repository's name ("wiki.git" -> "wiki").
        self.name = name or source_name_from(self.repo.name.removesuffix(".git"), "wiki")
        if not valid_source_name(self.name):
            raise ValueError(f"invalid source name {self.name!r} (expected {SOURCE_NAME_PATTERN})")
        self.location = f"git:{self.repo}:{self.subdir}"
        self.tenants = check_tenants(tenants)
        self._errors: list[str] = []
        self.locked_folders: tuple[str, ...] = ()  # SourceConnector.locked_folders: set by each pass
        self._skipped: list[Skipped] = []

    async def documents(self) -> AsyncIterator[SourceDocument]:
        self._errors, self._skipped = [], []
        try:
            commit = await self._resolve()
            entries = await self._list(commit)
        except GitError as exc:
            self._errors.append(str(exc))
            return
        manifests, broken, where = await self._manifests(entries)
        pages = sorted((e for e in entries if not _is_manifest(e.rel.rsplit("/", 1)[-1])), key=lambda e: e.rel)
        access, errors, self.locked_folders = resolve_tree(
            manifests, broken, [e.rel for e in pages], where, self.tenants
        )
        self._errors.extend(errors)
        for entry in pages:
            granted = access[entry.rel]
            if granted.tenant is None and not granted.locked:
                self._errors.append(
                    f"{self._where(entry.path)}: no tenant: no {MANIFEST_NAME} in this folder or above sets `tenant`"
                )
                granted = Access(None, (), locked=True)  # a copy indexed before must not keep its readers
            yield SourceDocument(
                doc_id=entry.rel,
                tenant=granted.tenant or "",
                acl=granted.acl,
                title=PurePosixPath(entry.rel).stem,
                content_type=EXTENSIONS[PurePosixPath(entry.rel).suffix.lower()],
                source_url=self._url(commit, entry),
                fingerprint=entry.sha,
                fetch=self._reader(entry),
                locked=granted.locked,
            )

    def check(self) -> str:
        """The commit `ref` names now; GitError saying why when there is none (a typo, a missing repository)."""
        return asyncio.run(self._resolve())

    async def _resolve(self) -> str:
        """The ref as a commit SHA, so the whole pass reads one snapshot even if the branch moves."""
        try:
            out = await self._git("rev-parse", "--verify", "--quiet", f"{self.ref}^{{commit}}")
        except GitError as exc:
            detail = f": {exc.stderr}" if exc.stderr else ""  # --quiet: an unknown ref says nothing
            raise GitError(f"{self.repo}: cannot resolve ref {self.ref!r} to a commit{detail}") from None
        commit = out.decode().strip()
        if self.subdir:
            try:
                kind = (await self._git("cat-file", "-t", f"{commit}:{self.subdir}")).decode().strip()
            except GitError:
                kind = "missing"
            if kind != "tree":
                raise GitError(f"{self.repo}: subdir {self.subdir!r} is not a folder at {self.ref} ({commit[:12]})")
        return commit

    async def _list(self, commit: str) -> list[_Entry]:
        """Pages and manifests of the tree; hidden names, other extensions, symlinks, submodules dropped."""
        args = ["ls-tree", "-r", "-z", "--full-tree", commit]
        if self.subdir:
            args += ["--", self.subdir]
        try:
            out = await self._git(*args)
        except GitError as exc:
            raise GitError(f"{self.repo}: cannot list {self.ref}: {exc}") from None
        prefix = f"{self.subdir}/" if self.subdir else ""
        entries: list[_Entry] = []
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, raw_path = record.partition(b"\t")
            mode, kind, sha = meta.split(b" ")
            try:
                path = raw_path.decode("utf-8")
            except UnicodeDecodeError:
                self._errors.append(f"{self.repo}@{self.ref}: {raw_path!r}: path is not UTF-8, skipped")
                continue
            if kind not in (b"blob", b"commit") or not path.startswith(prefix):
                continue
            rel = path[len(prefix) :]
            *folders, name = rel.split("/")
            if any(part.startswith(".") for part in folders):
                continue  # hidden folders are not walked, as on a drive (their manifests neither)
            # Manifests of any mode (and names almost like one) are kept so they are reported, not ignored.
            if _is_manifest(name) or (_is_page(name) and mode in _REGULAR_MODES):
                entries.append(_Entry(path, rel, mode, sha.decode()))
            elif name.startswith("."):
                continue
            elif mode == b"120000":
                self._skipped.append(Skipped(rel, "symlink", "links are never followed"))
            elif mode not in _REGULAR_MODES:
                self._skipped.append(Skipped(rel, "not a file", "a submodule"))
            else:
                self._skipped.append(Skipped(rel, "unsupported type"))
        return entries

    async def _manifests(self, entries: list[_Entry]) -> tuple[dict[str, Manifest], dict[str, str], dict[str, str]]:
        """Every committed manifest by folder, the folders whose manifest is broken, and their names."""
        manifests: dict[str, Manifest] = {}
        broken: dict[str, str] = {}
        where: dict[str, str] = {}
        for entry in entries:
            name = entry.rel.rsplit("/", 1)[-1]
            if not _is_manifest(name):
                continue
            folder = entry.rel.rpartition("/")[0]
            here = self._where(entry.path)
            if name == MANIFEST_NAME:
                where[folder] = here
            else:
                where.setdefault(folder, here)
            try:
                if name != MANIFEST_NAME:
                    raise ValueError(f"{here}: not read as an ACL manifest: the name must be exactly {MANIFEST_NAME}")
                if entry.mode not in _REGULAR_MODES:
                    raise ValueError(f"{here}: invalid ACL manifest: not a regular file (symlinks are not followed)")
                try:
                    data = await self._git("cat-file", "blob", entry.sha)
                except GitError as exc:
                    raise ValueError(f"{here}: cannot read ACL manifest: {exc}") from None
                manifests[folder] = parse_manifest(data, here)
            except ValueError as exc:
                self._errors.append(str(exc))
                broken[folder] = str(exc)
        return manifests, broken, where

    def _reader(self, entry: _Entry) -> Callable[[], Awaitable[bytes]]:
        async def fetch() -> bytes:
            return await self._git("cat-file", "blob", entry.sha)

        return fetch

    def _where(self, path: str) -> str:
        """How errors name a file: repository, ref as given, and path, e.g. /srv/wiki@main:hr/x.md."""
        return f"{self.repo}@{self.ref}:{path}"

    def _url(self, commit: str, entry: _Entry) -> str:
        values = {"repo": str(self.repo), "ref": self.ref, "commit": commit, "path": entry.path, "doc_id": entry.rel}
        return self.url_template.format(**{k: quote(v, safe="/") for k, v in values.items()})

    async def _git(self, *args: str) -> bytes:
        """Run git in the repository; GitError carries stderr. Killed after `timeout_s` (a hung NFS, a lock)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                "git",
                "-C",
                str(self.repo),
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **_GIT_ENV},
            )
        except OSError as exc:
            raise GitError(f"cannot run git: {exc.strerror or exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise GitError(f"git {args[0]} timed out after {self.timeout_s:g}s") from None
        if proc.returncode != 0:
            stderr = err.decode("utf-8", errors="replace").strip().removeprefix("fatal: ")
            raise GitError(stderr or f"git {args[0]} exited with status {proc.returncode}", stderr)
        return out

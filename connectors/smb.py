"""An SMB share (a Windows file server, Samba) as a source: files over SMB2/3, access from each file's NT ACL.

Why impacket: the connector needs three things from the server, and impacket speaks all of them over
one authenticated SMB2/3 session: the files (SMB 2.1/3.x, dialect negotiated), each file's security
descriptor (SMB2 QUERY_INFO with OWNER|GROUP|DACL, parsed by impacket.ldap.ldaptypes), and the
server's directory over DCE/RPC on IPC$: SAMR for the users and the domain groups each one is in,
LSA LookupSids for the names of the other SIDs the report mentions. smbprotocol reads files and
descriptors as well but has no SAMR or LSA client, so SIDs would have to be mapped by hand in the
settings; pysmb speaks SMB1/SMB2 without descriptors or RPC.

What is read, as the drive connector reads a folder: every file under `path` whose extension the
drive reads (connectors.drive.EXTENSIONS), up to `max_bytes`, hidden names ignored; links are not
followed (a reparse point is skipped). Who reads it: connectors.nt_acl evaluates the share's and the
file's DACL for each user the server's SAM lists and connectors.permissions turns that into the
allow list, never wider, each narrowing reported.

Fail closed:
- a server that cannot be reached or refuses the login fails the pass (one line, `SmbUnavailable`):
  nothing is published, so nothing is deleted;
- a folder that cannot be listed is an error of the listing (deletions wait for a complete one);
- a file whose security descriptor cannot be read is readable by nobody, and the report says why;
- the share's own permissions: Samba does not hand its share ACL to clients (NetrShareGetInfo level
  502 comes back empty), so unless the server returns one, the source must declare `share_open` (the
  share grants every user, Samba's default); otherwise the pass fails rather than guess.
Credentials come from the settings or the environment, never from the share, and are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from connectors import smb_rpc
from connectors.base import PassReport, Skipped, SourceDocument
from connectors.drive import DEFAULT_MAX_BYTES, EXTENSIONS, document_url
from connectors.nt_acl import Descriptor, SamDirectory, decide
from connectors.permissions import PrincipalMap
from connectors.smb_rpc import parse_descriptor
from connectors.smb_rpc import short as _short
from schemas.errors import SourceUnavailable
from schemas.events import SOURCE_NAME_PATTERN, valid_source_name

READ_CONTROL = 0x00020000
FILE_READ_DATA = 0x00000001
FILE_READ_ATTRIBUTES = 0x00000080
FILE_SHARE_READ = 0x1
FILE_SHARE_WRITE = 0x2
FILE_SHARE_DELETE = 0x4
FILE_NON_DIRECTORY_FILE = 0x40
FILE_OPEN_REPARSE_POINT = 0x00200000
FILE_ATTRIBUTE_REPARSE_POINT = 0x400
SECURITY_INFORMATION = 0x1 | 0x2 | 0x4  # owner, group, DACL
CHUNK = 1 << 20
PIPELINE = 64
SESSION_MAX_AGE_S = 300.0
"""Descriptor requests in flight at once on the connection (Samba grants far more credits)."""


class SmbUnavailable(SourceUnavailable):
    """The server cannot be reached or refuses the connector: the whole pass fails, nothing is deleted."""


@dataclass(frozen=True)
class SmbTarget:
    server: str
    share: str
    port: int = 445
    path: str = ""
    username: str = ""
    password: str = field(default="", repr=False)
    domain: str = ""
    timeout_s: float = 15.0

    def where(self) -> str:
        return f"//{self.server}:{self.port}/{self.share}" + (
            f"/{self.path.strip('/')}" if self.path.strip("/") else ""
        )


def _unc(path: str) -> str:
    return path.replace("/", "\\")


@dataclass
class _Listed:
    rel: str
    size: int
    mtime_ns: int
    descriptor: Descriptor | None
    why_unreadable: str = ""


@dataclass
class _Listing:
    sam: SamDirectory
    share: Descriptor | None
    files: list[_Listed]
    errors: list[str]
    skipped: list[Skipped]
    names: dict[str, str]


class _Session:
    """One logged-in SMB session and its tree (not thread-safe: the connector serialises calls)."""

    def __init__(self, target: SmbTarget) -> None:
        from impacket.smbconnection import SMBConnection

        self.target = target
        try:
            self.conn = SMBConnection(
                target.server, target.server, sess_port=target.port, timeout=int(target.timeout_s)
            )
            self.conn.login(target.username, target.password, target.domain)
            self.tid = self.conn.connectTree(target.share)
        except Exception as exc:
            raise SmbUnavailable(f"{target.where()}: cannot connect: {_short(exc)}") from None

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a dead connection is closed already
            self.conn.close()

    def list(self, folder: str) -> list[Any]:
        pattern = _unc(f"{folder}/*" if folder else "*")
        return list(self.conn.listPath(self.target.share, pattern))

    def descriptor(self, rel: str) -> Descriptor:
        """One file's descriptor (open for READ_CONTROL, query, close): three round trips."""
        from impacket.smb3structs import SMB2_0_INFO_SECURITY

        fid = self.conn.openFile(
            self.tid,
            _unc(rel),
            desiredAccess=READ_CONTROL,
            shareMode=FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            creationOption=FILE_NON_DIRECTORY_FILE | FILE_OPEN_REPARSE_POINT,
        )
        try:
            raw = self.conn._SMBConnection.queryInfo(
                self.tid,
                fid,
                infoType=SMB2_0_INFO_SECURITY,
                fileInfoClass=0,
                additionalInformation=SECURITY_INFORMATION,
                flags=0,
            )
        finally:
            self.conn.closeFile(self.tid, fid)
        return parse_descriptor(bytes(raw))

    def descriptors(self, paths: Sequence[str]) -> Sequence[Descriptor | str]:
        """Every file's descriptor, or why it could not be read (that file's own failure, a string).

        Pipelined over SMB2/3 (connectors.smb_wire: three round trips a batch, little CPU); one at a
        time otherwise. A broken connection raises: the caller fails the pass."""
        from connectors import smb_wire

        smb = self.conn._SMBConnection
        if not smb_wire.usable(smb, self.tid):
            return [self._one(p) for p in paths]
        raw = smb_wire.descriptors(
            smb,
            self.tid,
            paths,
            access=READ_CONTROL,
            share=FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            options=FILE_NON_DIRECTORY_FILE | FILE_OPEN_REPARSE_POINT,
            info=SECURITY_INFORMATION,
            batch=PIPELINE,
            timeout_s=self.target.timeout_s,
        )
        found: list[Descriptor | str] = []
        for got in raw:
            if isinstance(got, str):
                found.append(got)
                continue
            try:
                found.append(parse_descriptor(got))
            except ValueError as exc:
                found.append(str(exc))
        return found

    def _one(self, path: str) -> Descriptor | str:
        try:
            return self.descriptor(path)
        except Exception as exc:
            return _short(exc)

    def read(self, rel: str, limit: int, deadline: float) -> bytes:
        fid = self.conn.openFile(
            self.tid,
            _unc(rel),
            desiredAccess=FILE_READ_DATA | FILE_READ_ATTRIBUTES,
            shareMode=FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            creationOption=FILE_NON_DIRECTORY_FILE | FILE_OPEN_REPARSE_POINT,
        )
        try:
            chunks: list[bytes] = []
            offset = 0
            while True:
                if time.monotonic() > deadline:
                    raise OSError(f"{rel}: reading took longer than {self.target.timeout_s:.0f} s")
                chunk = self.conn.readFile(self.tid, fid, offset, CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
                if offset > limit:
                    raise OSError(f"{rel}: grew past {limit} bytes since it was listed")
                if len(chunk) < CHUNK:
                    break
            return b"".join(chunks)
        finally:
            self.conn.closeFile(self.tid, fid)

    def directory(self) -> SamDirectory:
        """The server's own domain (not Builtin): its users, their domain groups, its groups."""
        try:
            return smb_rpc.directory(self.conn, self.target)
        except smb_rpc.Unavailable as exc:
            raise SmbUnavailable(str(exc)) from None

    def share_descriptor(self) -> Descriptor | None:
        """The share's ACL when the server hands it out (NetrShareGetInfo 502), else None."""
        return smb_rpc.share_descriptor(self.conn, self.target)

    def names(self, sids: Collection[str]) -> dict[str, str]:
        """Display names for SIDs (LSA LookupSids); those the server cannot name are left out."""
        return smb_rpc.names(self.conn, self.target, sids)


class SmbConnector(PassReport):
    """`tenant`: the only tenant its documents go to (declared in the settings). `share_open`: the share
    grants every user (for servers that do not hand their share ACL to the connector)."""

    def __init__(
        self,
        target: SmbTarget,
        name: str,
        *,
        tenant: str,
        principals: PrincipalMap | None = None,
        share_open: bool = False,
        url_base: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if not valid_source_name(name):
            raise ValueError(f"invalid source name {name!r} (expected {SOURCE_NAME_PATTERN})")
        self.name = name
        self.target = target
        self.location = f"smb:{target.where()}"
        self.tenant = tenant
        self.principals = principals or PrincipalMap()
        self.share_open = share_open
        self.url_base = url_base
        self.max_bytes = max_bytes
        self._errors: list[str] = []
        self._skipped: list[Skipped] = []
        self._session: _Session | None = None
        self._session_at = 0.0
        self._lock = threading.Lock()

    @property
    def locked_folders(self) -> tuple[str, ...]:
        """None: a share's access comes from its security descriptors, never from a manifest."""
        return ()

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def _fresh(self) -> _Session:
        self._drop()
        self._session = _Session(self.target)
        self._session_at = time.monotonic()
        return self._session

    def _drop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _directory(self) -> tuple[_Session, SamDirectory]:
        """The pass's session and the server's users and groups, read afresh every pass.

        Why the session is kept between passes: logging in again costs several round trips per pass.
        It is renewed after SESSION_MAX_AGE_S (a changed password or share setting is met within
        that), when the target changed, and whenever asking the directory fails on it (a restarted
        server): then once more on a fresh session, whose failure fails the pass."""
        session = self._session
        if (
            session is not None
            and session.target == self.target
            and time.monotonic() - self._session_at < SESSION_MAX_AGE_S
        ):
            try:
                return session, session.directory()
            except Exception:  # a dead connection or a stale session: retried on a fresh one
                self._drop()
        session = self._fresh()
        try:
            return session, session.directory()
        except SmbUnavailable:
            raise
        except Exception as exc:
            raise SmbUnavailable(
                f"{self.target.where()}: cannot read the server's users and groups (SAMR): {_short(exc)}"
            ) from None

    async def documents(self) -> AsyncIterator[SourceDocument]:
        self._errors, self._skipped = [], []
        listing = await asyncio.to_thread(self._list)
        self._errors.extend(listing.errors)
        self._skipped.extend(listing.skipped)
        descriptors_above = [listing.share] if listing.share is not None else []
        for file in listing.files:
            suffix = PurePosixPath(file.rel).suffix.lower()
            if file.descriptor is None:
                acl: tuple[str, ...] = ()
                narrowed: tuple[str, ...] = (
                    f"security descriptor unreadable ({file.why_unreadable}): readable by nobody",
                )
            else:
                decision = decide([*descriptors_above, file.descriptor], listing.sam, self.principals, listing.names)
                acl, narrowed = decision.translation.acl, decision.translation.narrowed
            yield SourceDocument(
                doc_id=file.rel,
                tenant=self.tenant,
                acl=acl,
                title=PurePosixPath(file.rel).stem,
                content_type=EXTENSIONS[suffix],
                source_url=document_url(self.url_base, file.rel),
                fingerprint=f"{file.mtime_ns}-{file.size}",
                fetch=self._reader(file),
                narrowed=narrowed,
            )

    def _list(self) -> _Listing:
        with self._lock:
            session, sam = self._directory()
            share = session.share_descriptor()
            if share is None and not self.share_open:
                raise SmbUnavailable(
                    f"{self.target.where()}: the server does not hand out the share's permissions: declare"
                    " share_open = true if the share grants every user (Samba's default)"
                )
            errors: list[str] = []
            skipped: list[Skipped] = []
            files: list[_Listed] = []
            root = self.target.path.strip("/")
            pending = [""]
            while pending:
                rel = pending.pop()
                folder = f"{root}/{rel}".strip("/") if rel else root
                try:
                    entries = sorted(session.list(folder), key=lambda e: str(e.get_longname()))
                except Exception as exc:
                    if not rel and "NOT_FOUND" in str(exc):
                        raise SmbUnavailable(f"{self.target.where()}: no such folder on the share") from None
                    errors.append(f"{self.target.where()}/{rel}: cannot list folder: {_short(exc)}")
                    continue
                for entry in entries:
                    entry_name = str(entry.get_longname())
                    if entry_name in (".", "..") or entry_name.startswith("."):
                        continue
                    child = f"{rel}/{entry_name}" if rel else entry_name
                    if entry.get_attributes() & FILE_ATTRIBUTE_REPARSE_POINT:
                        skipped.append(Skipped(child, "symlink", "links are never followed"))
                    elif entry.is_directory():
                        pending.append(child)
                    elif PurePosixPath(entry_name).suffix.lower() not in EXTENSIONS:
                        skipped.append(Skipped(child, "unsupported type"))
                    elif entry.get_filesize() > self.max_bytes:
                        skipped.append(
                            Skipped(child, "too large", f"{entry.get_filesize()} bytes, limit {self.max_bytes}")
                        )
                    else:
                        files.append(
                            _Listed(child, int(entry.get_filesize()), int(entry.get_mtime_epoch() * 1e9), None)
                        )
            try:
                read = session.descriptors([f"{root}/{f.rel}" if root else f.rel for f in files])
            except Exception as exc:  # the connection, not a file: fail the pass, publish nothing
                self._drop()
                raise SmbUnavailable(
                    f"{self.target.where()}: lost the connection reading security descriptors: {_short(exc)}"
                ) from None
            for listed, got in zip(files, read, strict=True):
                if isinstance(got, Descriptor):
                    listed.descriptor = got
                else:
                    listed.why_unreadable = got
            unknown = {
                ace.sid
                for f in files
                for ace in (f.descriptor.dacl or () if f.descriptor else ())
                if not sam.known(ace.sid)
            }
            names = session.names(unknown)
        files.sort(key=lambda f: f.rel)
        return _Listing(sam, share, files, errors, skipped, names)

    def _reader(self, file: _Listed) -> Callable[[], Awaitable[bytes]]:
        root = self.target.path.strip("/")
        path = f"{root}/{file.rel}" if root else file.rel

        def read() -> bytes:
            deadline = time.monotonic() + self.target.timeout_s
            with self._lock:
                session = self._session
                if session is None:
                    session = self._fresh()
                try:
                    return session.read(path, self.max_bytes, deadline)
                except OSError:
                    raise
                except Exception as exc:
                    raise OSError(f"cannot read over SMB: {_short(exc)}") from None

        async def fetch() -> bytes:
            return await asyncio.to_thread(read)

        return fetch


__all__ = ["SmbConnector", "SmbTarget", "SmbUnavailable", "parse_descriptor"]

"""A DokuWiki as a source, read through its remote API as a connector on another machine would.

    [[sources]]
    name = "wiki"
    kind = "dokuwiki"
    url = "https://wiki.example"       # the wiki's base URL (…/lib/exe/xmlrpc.php is the API)
    username = "ragsync"               # a member of the wiki's `remoteuser` and superuser group
    password_env = "WIKI_PASSWORD"     # or password = "…" in the settings file
    tenants = ["acme"]

The wiki is the only authority on who reads a page (issue 19). Every pass reads, through the API:
- `wiki.getAllPages`: every page with its current revision (the listing; the revision time is the
  fingerprint and the version's `effective_from`, so `--as-of` answers from the page as it stood);
- `plugin.acl.listAcls`: every ACL rule (namespace `ns:*` and page rules, users and @groups, @ALL);
- the user manager's export (`doku.php?do=admin&page=usermanager&fn[export]=1`, the admin's CSV of
  every user and their groups): the 2022-07-31 API has no call that lists users, and this is what
  an admin of the wiki can read over HTTP, so the wiki's files are never read;
- `wiki.aclCheck(page, user)` once per user and group when the directory changes, only to learn
  who the wiki treats as a superuser (its answer is 255 for them alone; `superuser` is a setting of
  the wiki that the API does not show).

Why the per-page decision is computed here from the rules rather than asked with `wiki.aclCheck`
per (page, user): this version's `system.multicall` answers nothing, and one call per pair costs
~20 ms, so a 200-page wiki with 30 principals would take minutes per pass, far behind a revocation.
`decide` is DokuWiki's own `auth_aclcheck_cb` (the page's own rules first, then each namespace up
to the root; the first level with a rule for the user, one of their groups or @ALL decides, with the
highest level among those rules; superusers read everything), and the tests compare it pair by
pair with the wiki's `wiki.aclCheck` after random edits. `connectors.permissions.translate` turns
the decisions per known user into the allow list, stricter where @ALL admits unknown readers.

Why every pass lists all pages rather than asking `wiki.getRecentChanges`: `getAllPages` is one
call that returns every page with its current revision, so an unchanged page costs a comparison of
fingerprints and nothing is fetched, while recent changes would still need the full list for the
deletions it cannot show (and it answers "no changes" with a fault). Each pass's listing is
complete, so the scheduler's passes (every `interval_s`) may delete; a pass whose listing failed
raises before anything is compared.

Each revision is a version (`wiki.getPageVersions`, `wiki.getPageHTMLVersion`): when a page is first
seen, or its current revision is not the one indexed, the scanner asks for the revisions between the
indexed one and the current one (SourceDocument.earlier) and emits each, oldest first, as an upsert of
its own version whose `effective_from` is the revision's time, so `--as-of` answers from the page as
it stood. Bounded: the newest `revisions` revisions (setting, default 10) including the current one;
the sync report names a page whose older ones were left out ("history bounded"). History stops at a
deletion (a re-created page starts afresh). Every revision carries the page's current ACL: the wiki
keeps no ACL history, and the index never allows what the wiki denies now. A revision that cannot be
read is that revision's error, reported; the others and the current one are indexed.

ACL edits are not page changes, so every pass reads the rules and the users again and translates
every page (pure, milliseconds for hundreds of pages); the scanner compares each page's ACL with
the one it holds and publishes only the changes. Any failure to read the listing raises
(one line, nothing deleted); a failure to read the rules or the users locks every page (readable
by nobody) and is reported, and a page whose rules cannot be evaluated is locked alone.
Renames are what the wiki makes of them (the 2022 core has no rename call): the old page deleted,
a new one created, so a full pass deletes the old ID and indexes the new one.
"""

from __future__ import annotations

import asyncio
import csv
import http.client
import io
import urllib.parse
import xmlrpc.client
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from connectors.base import Earlier, PassReport, Skipped, SourceDocument
from connectors.dokuwiki_history import PageHistory, earlier
from connectors.permissions import Directory, PrincipalMap, Translation, translate
from schemas.errors import SourceUnavailable

READ = 1
ADMIN = 255
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""A bound on any one answer of the wiki (the page list, a rendered page, the user export)."""


class DokuWikiError(SourceUnavailable):
    """The wiki could not be read: the pass fails in one line and deletes nothing."""


Rules = Mapping[str, Mapping[str, int]]
"""scope ('ns:*', 'ns:page' or '*') -> principal ('user', '@group', '@ALL') -> level."""


def namespace(page: str) -> str:
    return page.rsplit(":", 1)[0] if ":" in page else ""


def decide(rules: Rules, page: str, user: str, groups: frozenset[str], superuser: bool = False) -> int:
    """DokuWiki's `auth_aclcheck_cb` for a case-sensitive auth backend (authplain): the level `user`
    with `groups` (bare names) has on `page`. -1 never escapes: no rule at all is no access."""
    if superuser:
        return ADMIN
    names = {f"@{g}" for g in groups} | {"@ALL"}
    if user:
        names.add(user)

    def level(scope: str) -> int:
        best = -1
        for name, value in rules.get(scope, {}).items():
            if name in names:
                best = max(best, min(int(value), 16))  # "no admins in the ACL": capped at delete
        return best

    found = level(page)
    if found > -1:
        return found
    ns = namespace(page)
    while True:
        scope = f"{ns}:*" if ns else "*"
        found = level(scope)
        if found > -1:
            return found
        if scope == "*":
            return 0
        ns = namespace(ns)


class _Session(xmlrpc.client.Transport):
    """XML-RPC over one logged-in session (DokuWiki's cookie), with a timeout and a size bound.

    Basic auth would make the wiki verify the password hash on every call (~250 ms with bcrypt);
    the session cookie is checked in microseconds. Cookies are kept in memory only, never logged."""

    def __init__(self, timeout_s: float, https: bool) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self.https = https
        self.cookies: dict[str, str] = {}

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        chost, _, _ = self.get_host_info(host)
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(chost, timeout=self.timeout_s)

    def send_headers(self, connection: http.client.HTTPConnection, headers: list[tuple[str, str]]) -> None:
        if self.cookies:
            connection.putheader("Cookie", self.cookie_header())
        super().send_headers(connection, headers)

    def cookie_header(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.cookies.items())

    def keep(self, response: http.client.HTTPResponse) -> None:
        for header in response.msg.get_all("Set-Cookie") or []:
            key, _, value = header.split(";", 1)[0].partition("=")
            if value == "deleted":
                self.cookies.pop(key.strip(), None)
            else:
                self.cookies[key.strip()] = value

    def parse_response(self, response: http.client.HTTPResponse) -> Any:
        self.keep(response)
        parser, unmarshaller = self.getparser()
        total = 0
        while chunk := response.read(65536):
            total += len(chunk)
            if total > MAX_RESPONSE_BYTES:
                raise DokuWikiError(f"an answer of the wiki is over {MAX_RESPONSE_BYTES} bytes")
            parser.feed(chunk)
        parser.close()
        return unmarshaller.close()


@dataclass(frozen=True)
class _Page:
    id: str
    revision: int
    size: int


class DokuWikiClient:
    """The remote API calls the connector and the tests need, synchronous (run in a thread)."""

    def __init__(self, url: str, user: str, password: str, *, timeout_s: float = 30.0) -> None:
        self.base = url.rstrip("/")
        parts = urllib.parse.urlsplit(self.base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"dokuwiki url {url!r} is not an http(s) URL")
        self._parts = parts
        self._user, self._password = user, password
        self.timeout_s = timeout_s
        self._session = _Session(timeout_s, parts.scheme == "https")
        self._proxy = xmlrpc.client.ServerProxy(f"{self.base}/lib/exe/xmlrpc.php", transport=self._session)
        self._logged_in = False

    def twin(self) -> DokuWikiClient:
        """Another session with the same credentials, for calls made at the same time."""
        return DokuWikiClient(self.base, self._user, self._password, timeout_s=self.timeout_s)

    def __repr__(self) -> str:  # never the password
        return f"DokuWikiClient({self.base!r}, user={self._user!r})"

    def call(self, method: str, *args: Any) -> Any:
        """One API call; logs in first (and again once if the session expired)."""
        for attempt in range(2):
            if not self._logged_in:
                self._login()
            try:
                return getattr(self._proxy, method)(*args)
            except xmlrpc.client.ProtocolError as exc:
                if exc.errcode in (401, 403) and attempt == 0:
                    self._logged_in = False
                    continue
                raise DokuWikiError(f"{method}: HTTP {exc.errcode} {exc.errmsg}") from None
            except xmlrpc.client.Fault as exc:
                if exc.faultCode in (-32603, -32604) and attempt == 0:  # not authorized: session gone
                    self._logged_in = False
                    continue
                raise DokuWikiError(f"{method}: fault {exc.faultCode}: {exc.faultString}") from None
            except (OSError, http.client.HTTPException) as exc:
                raise DokuWikiError(f"{self.base} cannot be reached: {type(exc).__name__}: {exc}") from None
        raise DokuWikiError(f"{method}: not authorized for {self._user}")

    def _login(self) -> None:
        try:
            ok = self._proxy.dokuwiki.login(self._user, self._password)
        except (OSError, http.client.HTTPException) as exc:
            raise DokuWikiError(f"{self.base} cannot be reached: {type(exc).__name__}: {exc}") from None
        except (xmlrpc.client.Fault, xmlrpc.client.ProtocolError) as exc:
            raise DokuWikiError(f"{self.base}: login refused: {exc}") from None
        if not ok:
            raise DokuWikiError(f"{self.base}: login as {self._user} refused (wrong credentials?)")
        self._logged_in = True

    def pages(self) -> list[_Page]:
        listed = self.call("wiki.getAllPages")
        return [_Page(str(p["id"]), _epoch(p["lastModified"]), int(p.get("size", 0))) for p in listed]

    def rules(self) -> dict[str, dict[str, int]]:
        raw = self.call("plugin.acl.listAcls")
        if not isinstance(raw, dict):
            raise DokuWikiError("plugin.acl.listAcls: not a mapping of rules")
        return {str(scope): {str(n): int(level) for n, level in entries.items()} for scope, entries in raw.items()}

    def users(self) -> dict[str, frozenset[str]]:
        """Every user and their groups: the user manager's CSV export, read with the API's session."""
        if not self._logged_in:
            self._login()
        query = urllib.parse.urlencode({"do": "admin", "page": "usermanager", "fn[export]": "1"})
        path = f"{self._parts.path.rstrip('/')}/doku.php?{query}"
        conn = self._session.make_connection(self._parts.netloc)
        try:
            conn.request("GET", path, headers={"Cookie": self._session.cookie_header()})
            resp = conn.getresponse()
            body = resp.read(MAX_RESPONSE_BYTES + 1)
            kind = resp.getheader("Content-Type") or ""
        except (OSError, http.client.HTTPException) as exc:
            raise DokuWikiError(f"{self.base} cannot be reached: {type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
        if resp.status != 200 or not kind.startswith("text/csv"):
            raise DokuWikiError(f"the user manager's export is not available (HTTP {resp.status}, {kind or 'no type'})")
        if len(body) > MAX_RESPONSE_BYTES:
            raise DokuWikiError(f"the user list is over {MAX_RESPONSE_BYTES} bytes")
        rows = list(csv.reader(io.StringIO(body.decode("utf-8"))))
        users: dict[str, frozenset[str]] = {}
        for row in rows[1:]:
            if len(row) >= 4 and row[0]:
                users[row[0]] = frozenset(g for g in row[3].split(",") if g)
        return users

    def acl_check(self, page: str, user: str, groups: list[str] | None = None) -> int:
        args: tuple[Any, ...] = (page, user) if groups is None else (page, user, groups)
        return int(self.call("wiki.aclCheck", *args))

    def page_html(self, page: str, revision: int) -> bytes:
        return str(self.call("wiki.getPageHTMLVersion", page, revision)).encode("utf-8")

    def versions(self, page: str, first: int) -> list[tuple[int, str]]:
        """One batch of a page's changelog, newest first from the `first`-th entry (the current one is
        the 0th): (revision, type) with type 'C'reate, 'E'dit, 'e' minor, 'D'elete, 'R'evert."""
        raw = self.call("wiki.getPageVersions", page, first)
        if not isinstance(raw, list):
            raise DokuWikiError(f"wiki.getPageVersions {page}: not a list of revisions")
        try:
            return [(int(entry["version"]), str(entry.get("type", ""))) for entry in raw]
        except (KeyError, TypeError, ValueError) as exc:
            raise DokuWikiError(f"wiki.getPageVersions {page}: unreadable entry: {exc}") from None


def _epoch(value: Any) -> int:
    if isinstance(value, xmlrpc.client.DateTime):
        text = value.value
        try:
            when = datetime.fromisoformat(text) if "-" in text else datetime.strptime(text, "%Y%m%dT%H:%M:%S")
        except ValueError:
            raise DokuWikiError(f"unreadable page time {text!r}") from None
        return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp())
    if isinstance(value, int):
        return value
    raise DokuWikiError(f"unreadable page time {value!r}")


def doc_path(page: str) -> str:
    """`ns:sub:page` -> `ns/sub/page`: the page's name within the source (its doc ID's path)."""
    return page.replace(":", "/")


class DokuWikiConnector(PassReport):
    """The listing, rules and directory of one pass; content fetched lazily per page revision."""

    def __init__(
        self,
        client: DokuWikiClient,
        name: str,
        *,
        tenant: str,
        principals: PrincipalMap | None = None,
        revisions: int = 10,
    ) -> None:
        if revisions < 1:
            raise ValueError("revisions must be at least 1 (the current one)")
        self.revisions = revisions
        self.client = client
        self.name = name
        self.location = f"dokuwiki:{client.base}"
        self.tenant = tenant
        self.principals = principals or PrincipalMap()
        self._errors: list[str] = []
        self._skipped: list[Skipped] = []  # every page is a document: nothing is skipped
        self._superusers: tuple[Mapping[str, frozenset[str]], frozenset[str], frozenset[str]] | None = None
        self.unmapped: set[str] = set()
        self._helpers = (client.twin(), client.twin())

    @property
    def locked_folders(self) -> tuple[str, ...]:
        """None: pages whose rules cannot be read or evaluated are listed, each locked (`documents`)."""
        return ()

    def check(self) -> str:
        """The wiki answers and the credentials work (serve's start-up check)."""
        return str(self.client.call("dokuwiki.getVersion"))

    def _admins(self, users: Mapping[str, frozenset[str]], page: str) -> tuple[frozenset[str], frozenset[str]]:
        """Users and groups the wiki treats as superusers (aclCheck answers 255 for them alone)."""
        if self._superusers is not None and self._superusers[0] == users:
            return self._superusers[1], self._superusers[2]
        groups = sorted({g for gs in users.values() for g in gs})
        admin_users = frozenset(u for u in sorted(users) if self.client.acl_check(page, u) == ADMIN)
        admin_groups = frozenset(g for g in groups if self.client.acl_check(page, "", [g]) == ADMIN)
        self._superusers = (dict(users), admin_users, admin_groups)
        return admin_users, admin_groups

    async def documents(self) -> AsyncIterator[SourceDocument]:
        self._errors = []
        self.unmapped = set()
        # The three reads at once, each on a session of its own (a revocation waits for the slowest).
        listing = asyncio.ensure_future(asyncio.to_thread(self.client.pages))
        reading = asyncio.gather(
            asyncio.to_thread(self._helpers[0].rules), asyncio.to_thread(self._helpers[1].users), return_exceptions=True
        )
        try:
            pages = await listing  # DokuWikiError: the pass fails, nothing deleted
        finally:
            read = await reading
        try:
            for outcome in read:
                if isinstance(outcome, BaseException):
                    raise outcome
            rules, users = read[0], read[1]
            assert isinstance(rules, dict) and isinstance(users, dict)
            admins = await asyncio.to_thread(self._admins, users, pages[0].id if pages else "start")
        except DokuWikiError as exc:
            self._errors.append(f"permissions cannot be read, every page is readable by nobody: {exc}")
            for page in pages:
                yield self._document(page, (), (), locked=True)
            return
        directory = Directory(users)
        admin_users, admin_groups = admins
        groups = sorted({g for gs in users.values() for g in gs})
        for page in pages:
            try:
                result = self._translate(rules, page.id, directory, admin_users, admin_groups, groups)
            except (ValueError, TypeError) as exc:
                self._errors.append(f"{page.id}: permissions cannot be read, readable by nobody: {exc}")
                yield self._document(page, (), (), locked=True)
                continue
            self.unmapped |= result.unmapped
            yield self._document(page, result.acl, result.narrowed)

    def _translate(
        self,
        rules: Rules,
        page: str,
        directory: Directory,
        admin_users: frozenset[str],
        admin_groups: frozenset[str],
        groups: list[str],
    ) -> Translation:
        users = directory.groups_of

        def admits(user: str) -> bool:
            superuser = user in admin_users or bool(users[user] & admin_groups)
            return decide(rules, page, user, users[user], superuser) >= READ

        granted = [g for g in groups if decide(rules, page, "", frozenset({g}), g in admin_groups) >= READ]
        unknown = decide(rules, page, "", frozenset()) >= READ
        return translate(directory, self.principals, admits, granted, admits_unknown=unknown)

    def _document(
        self, page: _Page, acl: tuple[str, ...], narrowed: tuple[str, ...], *, locked: bool = False
    ) -> SourceDocument:
        query = urllib.parse.urlencode({"id": page.id, "rev": page.revision})
        return SourceDocument(
            doc_id=doc_path(page.id),
            tenant=self.tenant,
            acl=acl,
            title=page.id.rsplit(":", 1)[-1],
            content_type="html",
            source_url=f"{self.client.base}/doku.php?{query}",
            fingerprint=f"{page.revision}:{page.size}",
            fetch=self._reader(page),
            effective_from=datetime.fromtimestamp(page.revision, UTC),
            narrowed=narrowed,
            locked=locked,
            earlier=self._earlier(page, acl) if self.revisions > 1 and not locked else None,
        )

    def _reader(self, page: _Page, *, old: bool = False) -> Callable[[], Awaitable[bytes]]:
        async def fetch() -> bytes:
            data = await asyncio.to_thread(self.client.page_html, page.id, page.revision)
            if old and not data:  # the wiki answers '' for a revision whose attic copy is gone
                raise DokuWikiError(f"revision {page.revision} has no text in the wiki")
            return data

        return fetch

    def _earlier(self, page: _Page, acl: tuple[str, ...]) -> Callable[[str | None], Awaitable[Earlier]]:
        history = PageHistory(
            page.id, page.revision, doc_path(page.id), self.tenant, acl, self.client.base, self.revisions
        )
        return earlier(
            history,
            lambda first: self.client.versions(page.id, first),
            lambda rev: self._reader(_Page(page.id, rev, 0), old=True),
        )


__all__ = ["DokuWikiClient", "DokuWikiConnector", "DokuWikiError", "decide", "doc_path"]

"""Declared sources and live sync: `[[sources]]` in the settings file, watched folders, schedules.

    [[sources]]
    name = "handbook"              # the source name: doc IDs are handbook:<path>
    kind = "drive"                 # a folder with .ragsync-acl.toml manifests
    path = "/srv/handbook"
    tenants = ["acme"]             # the only tenants its manifests may name (required)
    watch = true                   # publish changes as files change (watchdog), debounced
    interval_s = 300               # full reconciliation every 5 minutes
    url_base = "https://intranet.example/handbook/"

    [[sources]]
    name = "shared"
    path = "/srv/shared"
    tenants = ["acme"]             # exactly one: the files name none
    permissions = "posix"          # readers from mode bits, owners, groups and POSIX ACLs
    watch = true                   # chmod, chown and setfacl are file events too
    [sources.principals]           # optional: system names to token names (default: the same)
    users = { "jdoe" = "john.doe" }
    groups = { "finance" = "fin" }

    [[sources]]
    name = "wiki"
    kind = "git"                   # the wiki committed at `ref`
    path = "/srv/wiki.git"
    ref = "main"
    tenants = ["acme", "globex"]
    interval_s = 60

    [[sources]]
    name = "intranet"
    kind = "dokuwiki"              # a DokuWiki read through its remote API (connectors.dokuwiki)
    url = "https://wiki.example"
    username = "ragsync"           # a superuser of the wiki, allowed to use the remote API
    password_env = "WIKI_PASSWORD" # or password = "..." here; never read from synced content
    tenants = ["acme"]             # exactly one: the wiki's pages all belong to it
    interval_s = 30
    [sources.principals]           # the same tables for every kind (default: the same names)
    users = { "bob" = "robert" }
    groups = { "staff" = "employees" }

    [[sources]]
    name = "fileserver"
    kind = "smb"                   # an SMB share: access from each file's NT ACL (connectors.smb)
    server = "files.example"
    port = 445
    share = "docs"
    path = "/policies"             # the folder on the share ("/" for all of it)
    username = "ragsync-reader"
    password_env = "RAGSYNC_SMB_PASSWORD"
    tenants = ["acme"]             # exactly one
    share_open = true              # the share's ACL grants every user (Samba does not hand it out)
    interval_s = 60
    [sources.principals]           # optional: server names to token names (default: the same name)
    groups = { "Domain Admins" = "admins" }

`tenants` is declared here, by whoever configures the source, and never taken from a file in it:
a manifest naming another tenant locks its folder (connectors.access), so a writer of one folder
cannot move documents into a tenant the source was not meant to feed. Like a webhook's `tenants`.

Two kinds of pass, so that a deletion is only ever decided on complete information:
- a *change pass* (after the watcher saw files change, debounced) lists the source and publishes
  upserts and ACL changes, never a deletion;
- a *full pass* (every `interval_s`, and brought forward when the watcher saw something removed)
  is the reconciliation: the only pass that may delete, and, as every scan, only when its listing
  was complete (no read error).
Each pass publishes into the event log and takes the source's scan lock, so a CLI sync, a watcher
and the owner's schedule never scan one source at the same time.

What an operator sees (logger `ragsync.sources`, which serve logs at INFO): one line per pass of
each source (its counts and duration), one WARNING line per problem the pass met (a document and
why it could not be read, a broken manifest, a folder that is gone, a ref git cannot resolve),
and one ERROR line for a pass that failed outright. `ragsync status` lists the latest pass's
problems per source and /readyz names the sources whose latest pass failed or had problems
(ragsync.sync_history). A source that cannot work at all (its path missing, a file where a folder
is expected, an unknown git ref) is refused when serve starts (`startup_problems`), one line each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragsync.pipeline import publish_source
from ragsync.source_connectors import connector_for as connector_for  # re-exports: the factories
from ragsync.source_connectors import principal_map as principal_map
from ragsync.source_connectors import smb_connector as smb_connector
from ragsync.source_connectors import source_password as source_password
from ragsync.source_connectors import source_problems as source_problems
from ragsync.source_connectors import startup_problems as startup_problems
from ragsync.source_settings import SourceSettings as SourceSettings  # re-export

if TYPE_CHECKING:
    from connectors.scan import ScanReport

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.1
MAX_DELAY_S = 2.0
"""A pass starts once files were quiet for DEBOUNCE_S, or MAX_DELAY_S after the first change of a
burst that does not stop (a long copy still gets published as it goes). 0.1 s, not 0.3: a chmod or a
setfacl is one event, and the wait was most of a POSIX revocation's time before its pass; a change
pass never deletes, so one that starts inside a burst costs a listing, never a wrong answer."""
IDLE_CAP_S = 5.0
"""The longest an idle scheduler sleeps without a change or a full pass due (a clock that jumped)."""


def log_pass(name: str, kind: str, report: ScanReport, seconds: float) -> None:
    """The pass's line (INFO), then one WARNING line per problem, bounded like the status that lists them."""
    from ragsync.sync_history import MAX_PROBLEMS, shorten

    held = ", deletions held back" if report.deletes_skipped else ""
    log.info(
        "%s pass of %s: %d upserts, %d ACL changes, %d deletes, %d unchanged, %d problems%s in %.2fs",
        kind,
        name,
        report.upserts,
        report.acl_changes,
        report.deletes,
        report.unchanged,
        len(report.errors),
        held,
        seconds,
    )
    for problem in report.errors[:MAX_PROBLEMS]:
        log.warning("source %s: %s", name, shorten(problem))
    if len(report.errors) > MAX_PROBLEMS:
        log.warning("source %s: %d more problems not shown", name, len(report.errors) - MAX_PROBLEMS)


@dataclass
class Change:
    removed: bool  # something was deleted or moved away: the next pass must be a full one


class ChangeWatcher:
    """watchdog on a folder: remembers that something changed, and whether anything was removed.

    Changes below `ignore` (the home, when it sits inside the watched folder; .git) are not
    changes of the source, and would otherwise make every write to the stores trigger a pass.
    """

    def __init__(self, root: Path, *, ignore: Sequence[Path] = ()) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        self.root = root.resolve()
        self._ignore = [p.resolve() for p in ignore]
        self._lock = threading.Lock()
        self._first: float | None = None
        self._last = 0.0
        self._removed = False
        self.on_change: Callable[[], None] = lambda: None  # the scheduler's wake-up
        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                watcher._seen(event)

        self._observer = Observer()
        self._observer.schedule(Handler(), str(self.root), recursive=True)

    def _relevant(self, path: str) -> bool:
        resolved = Path(path)
        if ".git" in resolved.parts:
            return False
        return not any(resolved == p or p in resolved.parents for p in self._ignore)

    def _seen(self, event: Any) -> None:
        kind = event.event_type
        if kind in ("opened", "closed_no_write"):
            return
        paths = [str(event.src_path), str(event.dest_path or "")]
        if not any(p and self._relevant(p) for p in paths):
            return
        with self._lock:
            now = time.monotonic()
            if self._first is None:
                self._first = now
            self._last = now
            if kind in ("deleted", "moved"):
                self._removed = True
        self.on_change()

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(5)

    @property
    def pending(self) -> bool:
        """Changes seen and not yet taken (the scheduler then looks every tick until they settle)."""
        with self._lock:
            return self._first is not None

    def take(self, debounce_s: float = DEBOUNCE_S, max_delay_s: float = MAX_DELAY_S) -> Change | None:
        """The changes since the last take, once they settled; None while there are none (or not yet)."""
        with self._lock:
            if self._first is None:
                return None
            now = time.monotonic()
            if now - self._last < debounce_s and now - self._first < max_delay_s:
                return None
            change = Change(self._removed)
            self._first, self._removed = None, False
            return change


ACCOUNTS = Path("/etc")
ACCOUNT_FILES = frozenset({"passwd", "group"})


class AccountWatcher:
    """watchdog on /etc (not recursive) for the user and group databases, for POSIX sources.

    A user removed from a group (`gpasswd -d`, `usermod -G`) changes who may read without any event
    in the folder; tools rewrite /etc/group through a temporary file and a rename, so a move whose
    destination is one of these names counts too. A change is a change pass, never a deletion."""

    def __init__(self, folder: Path = ACCOUNTS, names: frozenset[str] = ACCOUNT_FILES) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        self._changed = threading.Event()
        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return
                paths = (str(event.src_path), str(event.dest_path or ""))
                if any(p and Path(p).name in names for p in paths):
                    watcher._changed.set()

        self._observer = Observer()
        self._observer.schedule(Handler(), str(folder), recursive=False)

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(5)

    def take(self) -> bool:
        changed = self._changed.is_set()
        self._changed.clear()
        return changed


class SourceRunner:
    """When one source's next pass is due, and of which kind."""

    def __init__(
        self,
        source: SourceSettings,
        home: Path,
        *,
        debounce_s: float = DEBOUNCE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.connector = connector_for(source, home)
        self.debounce_s = debounce_s
        self.clock = clock
        self.next_full = clock()  # a full pass first: the state may be behind the folder
        self._full_started = self.next_full
        self.watcher: ChangeWatcher | None = None
        self.accounts: AccountWatcher | None = None
        if source.watch and source.path is not None:
            self.watcher = ChangeWatcher(source.path, ignore=[home])
            if source.permissions == "posix" and ACCOUNTS.is_dir():
                self.accounts = AccountWatcher()

    def due(self) -> str | None:
        """ "full", "changes" or None."""
        if self.clock() >= self.next_full:
            self._full_started = self.clock()
            return "full"
        if self.watcher is not None:
            change = self.watcher.take(self.debounce_s)
            if change is not None:
                return "full" if change.removed else "changes"
        if self.accounts is not None and self.accounts.take():
            return "changes"
        return None

    def ran(self, kind: str) -> None:
        """Full passes start every interval_s (from the start of the last one, so a pass that takes a
        while does not stretch the interval a revocation may wait; back to back if longer)."""
        if kind == "full":
            self.next_full = self._full_started + self.source.interval_s


class Scheduler:
    """The owner's thread that syncs the declared sources: publishes only; the owner's worker applies."""

    def __init__(self, components: Any, sources: Sequence[SourceSettings], *, tick_s: float = 0.05) -> None:
        self.components = components
        self.runners = [SourceRunner(s, components.settings.home) for s in sources]
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        for runner in self.runners:
            if runner.watcher is not None:
                runner.watcher.on_change = self._wake.set
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.last_error: dict[str, str] = {}

    def start(self) -> None:
        for runner in self.runners:
            if runner.watcher is not None:
                runner.watcher.start()
            if runner.accounts is not None:
                runner.accounts.start()
        self._thread = threading.Thread(target=self._run, name="ragsync-sources", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        for runner in self.runners:
            if runner.watcher is not None:
                runner.watcher.stop()
            if runner.accounts is not None:
                runner.accounts.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)  # a scan in progress is abandoned after that: its batches are durable

    def _run(self) -> None:
        while not self._stop.is_set():
            for runner in self.runners:
                if self._stop.is_set():
                    return
                kind = runner.due()
                if kind is None:
                    continue
                name = runner.source.name
                started = time.monotonic()
                try:
                    published = publish_source(
                        self.components, runner.connector, allow_deletes=kind == "full", name=name
                    )
                except Exception as exc:  # one source failing must not stop the others
                    self.last_error[name] = f"{type(exc).__name__}: {exc}"
                    log.error(
                        "%s pass of %s failed after %.2fs: %s",
                        kind,
                        name,
                        time.monotonic() - started,
                        self.last_error[name],
                    )
                    log.debug("the failed pass of %s", name, exc_info=True)
                else:
                    self.last_error.pop(name, None)
                    log_pass(name, kind, published.scan, time.monotonic() - started)
                runner.ran(kind)
                self.passes += 1
            self._wake.wait(self._sleep_s())
            self._wake.clear()

    def _sleep_s(self) -> float:
        """Until the next thing to do: a tick while changes settle, else the next full pass or a change.

        An idle serve used to tick ten times a second for nothing (issue 20); a watched change wakes
        the thread (ChangeWatcher.on_change), and the cap only bounds a clock that jumped."""
        if self._stop.is_set() or any(r.watcher is not None and r.watcher.pending for r in self.runners):
            return self.tick_s
        until_full = min((r.next_full - r.clock() for r in self.runners), default=IDLE_CAP_S)
        return max(self.tick_s, min(IDLE_CAP_S, until_full))

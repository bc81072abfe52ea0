"""The operator console (`/console`) and the offline API docs (`/docs`) of `ragsync serve`.

Both are served by the app itself: no page fetches anything from outside the server, so they work
on a machine without internet. The console is behind the home's operator key (ragsync.operator_key),
never behind an asker's session token: it shows every tenant's sources, backlog, deletions and
traces, which no asker may see.
"""

from ragsync.console.docs import mount_docs
from ragsync.console.routes import mount_console

__all__ = ["mount_console", "mount_docs"]

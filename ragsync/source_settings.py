"""The `[[sources]]` and `[webhooks.<source>]` entries of the settings file, one model per entry.

Apart from ragsync/settings.py because an entry is validated on its own terms (which options each
kind of source takes, how its principals map) while Settings holds the process-wide knobs; a
source's model is also what `ragsync.sources` builds its connector from.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from connectors.access import TENANT_PATTERN
from schemas.events import SOURCE_NAME_PATTERN


class WebhookSourceSettings(BaseModel):
    """One webhook pusher (`[webhooks.<source>]`): its own secret and the tenants it may push for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: str = Field(min_length=16)
    tenants: tuple[str, ...] = Field(min_length=1)


class PrincipalsSettings(BaseModel):
    """`[sources.principals]`: source users and groups to token principals (connectors.permissions).

    Plain defaults: the same name (`ann` is `user:ann`, `hr` is `group:hr`); a name mapped to ""
    grants nothing (reported in the pass's narrowed permissions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: dict[str, str] = Field(default_factory=dict)
    groups: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _one_form(cls, data: Any) -> Any:
        """One form for every kind: the tables `users` and `groups`. The wiki-style flat form
        (`{ "@hr" = "group:people" }`) is refused with its table equivalent in the message: two forms
        of one setting made reviewers ask which wins when both are written."""
        if not isinstance(data, dict) or set(data) <= {"users", "groups"}:
            return data
        users: dict[str, str] = {}
        groups: dict[str, str] = {}
        for name, target in data.items():
            if isinstance(name, str) and isinstance(target, str):
                kind = "group" if name.startswith("@") else "user"
                (groups if kind == "group" else users)[name.removeprefix("@")] = target.removeprefix(f"{kind}:")
        tables = ", ".join(
            f"{key} = {{ {', '.join(f'{n!r} = {t!r}' for n, t in found.items())} }}".replace("'", '"')
            for key, found in (("users", users), ("groups", groups))
            if found
        )
        raise ValueError(f"principals: write the tables users and groups, e.g. [sources.principals] {tables}")


class SourceSettings(BaseModel):
    """One `[[sources]]` entry of the settings file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=SOURCE_NAME_PATTERN)  # the source name: the namespace of its doc IDs (<name>:<path>)
    kind: Literal["drive", "git", "dokuwiki", "smb"] = "drive"
    path: Path | None = None
    """The folder or repository (drive, git), the folder on the share (smb, "/" for all of it); a
    dokuwiki source has a `url` instead."""
    tenants: tuple[Annotated[str, Field(pattern=TENANT_PATTERN)], ...] = Field(min_length=1)
    """The only tenants its manifests may name."""
    ref: str = "HEAD"
    subdir: str = ""
    url_base: str | None = None
    interval_s: float = Field(default=300.0, gt=0)
    watch: bool = False
    permissions: Literal["manifests", "posix"] = "manifests"
    """Where a drive's readers come from: its manifests, or the files' POSIX permissions (one tenant)."""
    principals: PrincipalsSettings = PrincipalsSettings()
    """Source users and groups to token principals (dokuwiki, smb, posix drives); same names by default."""
    password: SecretStr | None = None
    """dokuwiki, smb: better left out of the file: `password_env` names the variable that holds it."""
    password_env: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    """dokuwiki, smb: the bound on each call to the server."""
    url: str | None = None
    """dokuwiki: the wiki's base URL (its remote API is <url>/lib/exe/xmlrpc.php)."""
    revisions: int = Field(default=10, ge=1, le=1000)
    """dokuwiki: how many of a page's newest revisions become versions (the current one included), so
    that a page with thousands of revisions cannot stall a pass; the sync report names pages cut short."""
    server: str = ""
    """smb: the file server's host name or address."""
    port: int = Field(default=445, gt=0, lt=65536)
    share: str = ""
    username: str = ""
    """dokuwiki, smb: the account ragsync logs in as (a wiki superuser allowed to use the remote API; a
    reader of the share). One name for both kinds: the wiki's former `user` is refused with a pointer."""
    domain: str = ""
    share_open: bool = False
    """smb: the share's own ACL grants every user (for a server, like Samba, that does not hand it out)."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """Why refused rather than aliased: two accepted spellings of one setting is what made the
        settings confusing; a one-line error at start costs one edit and can never half-apply."""
        if isinstance(data, dict) and "user" in data:
            raise ValueError("`user` is now `username` (one name for dokuwiki and smb): write username = ...")
        return data

    @model_validator(mode="after")
    def _kind_options(self) -> SourceSettings:
        given = self.model_fields_set
        wiki_only: list[str] = [n for n in ("url", "revisions") if n in given]
        smb_only: list[str] = [n for n in ("server", "port", "share", "domain", "share_open") if n in given]
        credentials: list[str] = [n for n in ("username", "password", "password_env") if n in given]
        mapped = bool(self.principals.users or self.principals.groups)
        if self.kind == "dokuwiki":
            if self.path is not None or self.watch or self.ref != "HEAD" or self.subdir:
                raise ValueError("a dokuwiki source takes url, username and a password, not path, watch, ref or subdir")
            if not self.url or not self.username or (self.password is None) == (self.password_env is None):
                raise ValueError("a dokuwiki source needs url, username and exactly one of password, password_env")
            if len(self.tenants) != 1:
                raise ValueError("a dokuwiki source feeds exactly one tenant")
            if smb_only:
                raise ValueError(f"{', '.join(smb_only)} apply to kind = 'smb' only")
        elif self.kind == "smb":
            if not self.server or not self.share:
                raise ValueError("kind = 'smb' needs server and share")
            if len(self.tenants) != 1:
                raise ValueError("kind = 'smb' feeds one tenant: tenants = [\"<one>\"]")
            if self.watch or self.ref != "HEAD" or self.subdir:
                raise ValueError("watch, ref and subdir do not apply to kind = 'smb' (it is read every interval_s)")
            if wiki_only:
                raise ValueError(f"{', '.join(wiki_only)} apply to kind = 'dokuwiki' only")
        else:
            if self.path is None:
                raise ValueError(f"a {self.kind} source needs a path")
            if smb_only:
                raise ValueError(f"{', '.join(smb_only)} apply to kind = 'smb' only")
            if wiki_only:
                raise ValueError(f"{', '.join(wiki_only)} apply to kind = 'dokuwiki' only")
            if credentials:
                raise ValueError(f"{', '.join(credentials)} apply to kind = 'dokuwiki' or 'smb' only")
            if self.permissions == "posix" and (self.kind != "drive" or len(self.tenants) != 1):
                raise ValueError("permissions = 'posix' applies to kind = 'drive' with exactly one tenant")
            if mapped and self.permissions != "posix":
                raise ValueError(
                    "principals apply to sources whose permissions come from the source (dokuwiki, smb, posix)"
                )
            if self.kind == "drive" and (self.ref != "HEAD" or self.subdir):
                raise ValueError("ref and subdir apply to kind = 'git' only")
            if self.kind == "git" and self.watch:
                raise ValueError("watch applies to kind = 'drive' only (a git source is synced every interval_s)")
        if self.kind != "drive" and self.permissions != "manifests":
            raise ValueError("permissions applies to kind = 'drive' only (a wiki's or a share's own ACLs decide)")
        return self


def duplicate_names(sources: Sequence[SourceSettings]) -> str | None:
    """Two sources with one name would share one namespace and one connector state: refused."""
    first: dict[str, int] = {}
    repeats: list[str] = []
    for i, source in enumerate(sources):
        if source.name in first:
            repeats.append(f"sources[{first[source.name]}] and sources[{i}] are both named {source.name!r}")
        else:
            first[source.name] = i
    if not repeats:
        return None
    return "; ".join(repeats) + ": every source needs a name of its own (the namespace of its doc IDs)"

"""What a declared source reads through, and whether it can be read at all (ragsync.sources runs them).

The factories of connectors for `[[sources]]` entries (drive, git, dokuwiki, smb), the one password
lookup both servers share, the principal mapping, and the checks made before serve starts. Split from
the scheduler because they are about one source's settings, not about when its passes run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragsync.source_settings import SourceSettings

if TYPE_CHECKING:
    from connectors.permissions import PrincipalMap
    from ragsync.source_settings import PrincipalsSettings


def principal_map(principals: PrincipalsSettings) -> PrincipalMap:
    """`[sources.principals]` -> PrincipalMap (same-name defaults; "" maps a name to nothing)."""
    from connectors.permissions import PrincipalMap

    return PrincipalMap(users=dict(principals.users), groups=dict(principals.groups))


def source_password(source: SourceSettings) -> str:
    """A dokuwiki's or an SMB share's password: from the settings, else from the variable `password_env`
    names (read at each start, never from synced content); a variable that is not set is a one-line
    error. Neither given is "" (an SMB server may take a login without one)."""
    if source.password is not None:
        return source.password.get_secret_value()
    if not source.password_env:
        return ""
    value = os.environ.get(source.password_env)
    if not value:
        raise ValueError(f"the environment variable {source.password_env} (password_env) is not set")
    return value


def source_problems(source: SourceSettings, home: Path) -> list[str]:
    """Why a declared source cannot be synced at all, checked before serve starts (empty when it can).

    A pass would otherwise report the same error every interval while serve looks healthy."""
    if source.kind == "smb":
        if source.password_env and source.password_env not in os.environ:
            return [f"password_env: the variable {source.password_env} is not set"]
        return []  # the server is asked at each pass: one that is down fails that pass, not serve's start
    if source.kind == "dokuwiki":
        # Its settings only: a wiki that is down now is a failed pass (one ERROR line, nothing
        # deleted) that the next interval retries, not a reason to refuse to serve the other sources.
        try:
            connector_for(source, home)
        except ValueError as exc:
            return [str(exc)]
        return []
    path = source.path
    assert path is not None  # the model requires it for these kinds
    if not path.exists():
        return [f"path {path} does not exist"]
    if not path.is_dir():
        what = "a git repository (a folder)" if source.kind == "git" else "a folder"
        return [f"path {path} is a file, not {what}"]
    try:
        connector = connector_for(source, home)
    except ValueError as exc:  # e.g. a ref git would take for an option
        return [str(exc)]
    if source.kind == "git":
        from connectors.git_wiki import GitError

        try:
            connector.check()
        except GitError as exc:
            return [str(exc)]
        return []
    refused: str | None = connector.refusal()
    return [refused] if refused else []


def startup_problems(
    declared: Sequence[SourceSettings], watched: Sequence[SourceSettings], home: Path, where: str
) -> list[str]:
    """One line per unusable source: `where` names the settings that declared them (a file, a variable)."""
    problems = [
        f"{where}: sources[{i}] ({s.name}): {problem}"
        for i, s in enumerate(declared)
        for problem in source_problems(s, home)
    ]
    problems += [f"--watch {s.path}: {problem}" for s in watched for problem in source_problems(s, home)]
    return problems


def connector_for(source: SourceSettings, home: Path) -> Any:
    """The connector a declared source reads through. `url_base` goes to the drive connector as is;
    a git wiki takes it as the prefix of its URL template (`<url_base>/<doc_id>`)."""
    from connectors.drive import DriveConnector
    from connectors.git_wiki import GitWikiConnector

    if source.kind == "dokuwiki":
        from connectors.dokuwiki import DokuWikiClient, DokuWikiConnector

        assert source.url is not None
        client = DokuWikiClient(source.url, source.username, source_password(source), timeout_s=source.timeout_s)
        principals = principal_map(source.principals)
        return DokuWikiConnector(
            client, source.name, tenant=source.tenants[0], principals=principals, revisions=source.revisions
        )
    if source.kind == "smb":
        return smb_connector(source)
    assert source.path is not None
    if source.kind == "git":
        options: dict[str, Any] = {}
        if source.url_base is not None:
            escaped = source.url_base.rstrip("/").replace("{", "{{").replace("}", "}}")
            options["url_template"] = escaped + "/{doc_id}"
        return GitWikiConnector(
            source.path, tenants=source.tenants, ref=source.ref, subdir=source.subdir, name=source.name, **options
        )

    principals = principal_map(source.principals)
    return DriveConnector(
        source.path,
        source.name,
        tenants=source.tenants,
        refuse=[home],
        url_base=source.url_base,
        permissions=source.permissions,
        principals=principals,
    )


def smb_connector(source: SourceSettings) -> Any:
    """An SMB share's connector (its password: source_password)."""
    from connectors.smb import SmbConnector, SmbTarget

    password = source_password(source)
    target = SmbTarget(
        server=source.server,
        share=source.share,
        port=source.port,
        path=(source.path or Path("/")).as_posix().strip("/").removeprefix("."),
        username=source.username,
        password=password,
        domain=source.domain,
        timeout_s=source.timeout_s,
    )
    return SmbConnector(
        target,
        source.name,
        tenant=source.tenants[0],
        principals=principal_map(source.principals),
        share_open=source.share_open,
        url_base=source.url_base,
    )

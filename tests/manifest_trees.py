"""A drive folder or a git repository built from the same description, for the manifest tests.

tests/test_manifest_narrowing.py (adversarial cases) and tests/test_manifest_property.py (random
trees against a reference model) run every tree through both tree-shaped connectors, which share
connectors/access.py: each must fail closed the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from connectors.base import SourceConnector
from connectors.drive import DriveConnector
from connectors.git_wiki import GitWikiConnector

KINDS = ("drive", "git")

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Wiki Bot",
    "GIT_AUTHOR_EMAIL": "bot@example.com",
    "GIT_AUTHOR_DATE": "2026-02-01T10:00:00Z",
    "GIT_COMMITTER_NAME": "Wiki Bot",
    "GIT_COMMITTER_EMAIL": "bot@example.com",
    "GIT_COMMITTER_DATE": "2026-02-01T10:00:00Z",
}


@dataclass(frozen=True)
class Link:
    """A symbolic link to `target` (relative to the link's folder, or absolute)."""

    target: str


Entry = str | Link | None  # text, a link, or None: remove it


class Tree:
    """Files written into a folder; for kind "git" that folder is a work tree, committed before each listing."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        root.mkdir(parents=True)
        self._env = {**os.environ, **GIT_ENV, "GIT_CONFIG_GLOBAL": str(root.parent / f"{root.name}.gitconfig")}
        if kind == "git":
            self._git("init", "-q", "-b", "main")

    def _git(self, *args: str) -> None:
        subprocess.run(["git", "-C", str(self.root), *args], check=True, capture_output=True, env=self._env)

    def write(self, files: dict[str, Entry]) -> None:
        for name, entry in files.items():
            path = self.root / name
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
            if entry is None:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(entry, Link):
                path.symlink_to(entry.target)
            else:
                path.write_text(entry, encoding="utf-8")
        if self.kind == "git":
            self._git("add", "-A")
            self._git("commit", "-q", "--allow-empty", "-m", "edit")

    def connector(self, tenants: tuple[str, ...]) -> SourceConnector:
        if self.kind == "git":
            return GitWikiConnector(self.root, tenants=tenants, name="wiki")
        return DriveConnector(self.root, "drive", tenants=tenants)

    def where(self, rel: str) -> str:
        """How the connector's messages name a file of the tree."""
        if self.kind == "git":
            return f"{self.root.resolve()}@HEAD:{rel}"
        return str(self.root.resolve() / rel)


def toml_string(value: str) -> str:
    """A TOML basic string (the JSON escapes of these names are TOML's too)."""
    import json

    return json.dumps(value, ensure_ascii=False)


def manifest_text(
    tenant: str | None = None,
    read: list[str] | None = None,
    files: dict[str, list[str]] | None = None,
    folders: dict[str, list[str]] | None = None,
) -> str:
    lines = []
    if tenant is not None:
        lines.append(f"tenant = {toml_string(tenant)}")
    if read is not None:
        lines.append(f"read = [{', '.join(toml_string(e) for e in read)}]")
    for table, rules in (("files", files or {}), ("folders", folders or {})):
        for key, entries in rules.items():
            lines += [f"[{table}.{toml_string(key)}]", f"read = [{', '.join(toml_string(e) for e in entries)}]"]
    return "\n".join(lines) + "\n"

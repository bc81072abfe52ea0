"""The drive connector's safety rules as a user meets them through `ragsync sync`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ragsync.cli import main


def env(home: Path) -> dict[str, str]:
    return {"RAGSYNC_HOME": str(home), "RAGSYNC_EMBED_MODEL_PATH": str(home / "none"), "RAGSYNC_SESSION_SECRET": "s"}


def drive(root: Path, manifest: str = 'tenant = "acme"\nread = ["group:staff"]\n') -> Path:
    root.mkdir(parents=True)
    (root / ".ragsync-acl.toml").write_text(manifest)
    (root / "a.md").write_text("# A\n\nSome text.\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n")
    return root


def test_a_manifest_entry_with_markup_characters_is_a_clean_one_line_error(tmp_path: Path) -> None:
    root = drive(tmp_path / "d", 'tenant = "acme"\nread = ["[/]"]\n')
    out = CliRunner().invoke(main, ["sync", str(root), "--tenant", "acme"], env=env(tmp_path / "home"))
    assert out.exit_code == 3, out.output
    assert "invalid ACL entry '[/]' (expected 'group:<name>' or 'user:<id>')" in out.output
    assert "Traceback" not in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)


def test_a_folder_that_contains_the_home_is_refused(tmp_path: Path) -> None:
    root = drive(tmp_path / "d")
    out = CliRunner().invoke(main, ["sync", str(root), "--tenant", "acme", "--json"], env=env(root / ".ragsync"))
    assert out.exit_code == 3
    report = json.loads(out.stdout)
    assert report["upserts"] == 0 and "refusing to sync a folder that contains the ragsync home" in report["errors"][0]


def test_files_not_indexed_are_listed_with_their_reason(tmp_path: Path) -> None:
    root = drive(tmp_path / "d")
    (root / "link.md").symlink_to(root / "a.md")
    out = CliRunner().invoke(
        main, ["sync", str(root), "--tenant", "acme", "--url-base", "https://files.example"], env=env(tmp_path / "h")
    )
    assert out.exit_code == 0, out.output
    assert "not indexed: link.md: symlink (links are never followed)" in out.output
    assert "not indexed: logo.png: unsupported type" in out.output
    assert "upserts=1" in out.output and "skipped=2" in out.output


def test_a_latin1_file_is_answered_with_its_accented_words_and_binary_is_reported(tmp_path: Path) -> None:
    import os

    from query.tokens import issue_token
    from schemas.principal import Principal

    root = drive(tmp_path / "d")
    menu = "Desserts\n\nThe dessert of the day is a crème brûlée with café glacé, served after lunch.\n"
    (root / "menu.txt").write_bytes(menu.encode("latin-1"))
    (root / "binary.md").write_bytes(os.urandom(300).replace(b"\n", b"\x00"))
    home = tmp_path / "home"
    runner = CliRunner()
    out = runner.invoke(main, ["sync", str(root), "--tenant", "acme", "--json"], env=env(home))
    report = json.loads(out.stdout)
    assert report["upserts"] == 2, out.output  # a.md and menu.txt; binary.md is not an upsert
    assert report["decoded"] == ["menu.txt: decoded as cp1252"]
    assert [s["path"] for s in report["skipped"] if s["reason"] == "binary"] == ["binary.md"]
    assert any(e.startswith("binary.md: binary content") for e in report["errors"]) and out.exit_code == 3
    token = issue_token("s", Principal(tenant="acme", user="ann", groups=("staff",)))
    ask = runner.invoke(main, ["ask", "What is the dessert of the day?", "--token", token, "--json"], env=env(home))
    answer = json.loads(ask.stdout)
    assert answer["answered"], ask.output
    assert "crème brûlée" in answer["answer"] and "\ufffd" not in answer["answer"]


def test_a_source_must_declare_its_tenants_and_a_manifest_may_name_no_other(tmp_path: Path) -> None:
    """Issue 18 item 2: the tenant came from whichever manifest a folder's writer committed."""
    root = drive(tmp_path / "d")
    runner = CliRunner()
    home = tmp_path / "home"
    undeclared = runner.invoke(main, ["sync", str(root)], env=env(home))
    assert undeclared.exit_code == 2, undeclared.output
    assert "sync: name the tenants the source may hold with --tenant" in undeclared.output
    assert not home.exists(), "nothing opened, nothing published"
    bad = runner.invoke(main, ["sync", str(root), "--tenant", "not a tenant"], env=env(home))
    assert bad.exit_code == 2 and "--tenant: invalid tenant 'not a tenant'" in bad.output

    other = runner.invoke(main, ["sync", str(root), "--tenant", "globex,initech", "--json"], env=env(home))
    assert other.exit_code == 3, other.output
    report = json.loads(other.stdout)
    assert report["upserts"] == 0
    [error] = report["errors"]
    assert error.startswith(f"{(root / '.ragsync-acl.toml').resolve()}: tenant 'acme' is not declared for this source")
    assert "(declared: globex, initech;" in error and error.endswith("every document below it is locked")

    ok = runner.invoke(main, ["sync", str(root), "--tenants", "globex", "--tenant", "acme", "--json"], env=env(home))
    assert ok.exit_code == 0 and json.loads(ok.stdout)["upserts"] == 1, ok.output


def test_serve_watch_needs_the_tenants_of_its_folders(tmp_path: Path) -> None:
    root = drive(tmp_path / "d")
    out = CliRunner().invoke(main, ["serve", "--watch", str(root), "--port", "0"], env=env(tmp_path / "home"))
    assert out.exit_code == 2 and "serve --watch: name the tenants the source may hold with --tenant" in out.output
    out = CliRunner().invoke(main, ["serve", "--tenant", "acme", "--port", "0"], env=env(tmp_path / "home"))
    assert out.exit_code == 2 and "--tenant declares the tenants of --watch folders" in out.output

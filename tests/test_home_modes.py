"""The home is private (issue 8 item 8): the folder 0700, every file in it 0600, the secret born 0600.

Before the fix every index file was 0644 and the session secret was written before it was made 0600.
The CLI runs in a subprocess with the usual umask 022, so the result never depends on this process.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODEL_PATH

from ragsync.demo import build_drive
from ragsync.home import read_or_create_secret, secure_home

REPO = Path(__file__).resolve().parents[1]


def modes(home: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(os.lstat(home).st_mode)}
    for path in home.rglob("*"):
        out[str(path.relative_to(home))] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragsync.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: os.umask(0o022),
    )


def test_every_file_the_stores_create_is_private(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    home = tmp_path / "home"
    env = {
        **os.environ,
        "RAGSYNC_HOME": str(home),
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_CONFIG": os.devnull,
    }
    env.pop("RAGSYNC_SESSION_SECRET", None)
    synced = cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
    assert synced.returncode == 0, synced.stderr
    assert '"dense": true' in synced.stdout, "the vector shard must be part of what is checked"
    token = cli(env, "token", "issue", "--tenant", "acme", "--user", "ann", "--groups", "staff")
    assert token.returncode == 0, token.stderr
    asked = cli(env, "ask", "What is the refund window?", "--token", token.stdout.strip())
    assert asked.returncode == 0, asked.stderr

    found = modes(home)
    assert {"session.secret", "events.db", "lexical.db", "state.db", "connectors.db", "vectors"} <= set(found)
    wide = {name: oct(mode) for name, mode in found.items() if mode & 0o077}
    assert wide == {}, "readable or writable by group or others"
    folders = [name for name in found if (home / name).is_dir() and not (home / name).is_symlink()]
    assert all(found[name] == 0o700 for name in folders), {n: oct(found[n]) for n in folders}
    assert found["session.secret"] == 0o600


def test_an_existing_world_readable_home_is_tightened_on_open(tmp_path: Path) -> None:
    home = tmp_path / "old-home"
    (home / "vectors" / "segments").mkdir(parents=True)
    for name in ("lexical.db", "lexical.db-wal", "vectors/segments/0.bin", "session.secret"):
        (home / name).write_text("x")
        os.chmod(home / name, 0o644)
    os.chmod(home, 0o755)
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    os.chmod(outside, 0o644)
    (home / "link").symlink_to(outside)
    secure_home(home)
    found = modes(home)
    assert found["."] == 0o700 and found["vectors"] == 0o700 and found["vectors/segments"] == 0o700
    assert all(found[n] == 0o600 for n in ("lexical.db", "lexical.db-wal", "vectors/segments/0.bin"))
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644, "a link is never followed out of the home"


def test_the_secret_is_born_private_and_created_once(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "h" / "session.secret"
        first = read_or_create_secret(path)
        assert len(first) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert read_or_create_secret(path) == first
        assert [p.name for p in path.parent.iterdir()] == ["session.secret"], "no temporary file left behind"
    finally:
        os.umask(old)


def test_a_secret_made_meanwhile_by_another_process_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "session.secret"
    real_link = os.link

    def racing_link(src: str, dst: str) -> None:
        Path(dst).write_text("theirs")  # another process linked its secret first
        real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    assert read_or_create_secret(path) == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["session.secret"]


def test_wal_and_shm_files_made_while_a_store_is_open_are_private(tmp_path: Path) -> None:
    from streams.sqlite_log import SqliteEventLog

    old = os.umask(0o022)
    try:
        home = secure_home(tmp_path / "home")
        log = SqliteEventLog(home / "events.db")
        try:
            log.publish_raw("documents", "k", b"{}")
            found = modes(home)
            assert {"events.db-wal", "events.db-shm"} <= set(found)
            assert all(mode & 0o077 == 0 for mode in found.values()), {n: oct(m) for n, m in found.items()}
        finally:
            log.close()
    finally:
        os.umask(old)

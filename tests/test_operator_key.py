"""The operator credential: a random key of one home, expiring and rotatable, which every command that
goes through `ragsync serve`'s owner API uses (issue 18: it was an HMAC of the session secret, the
same on every home sharing it and valid forever)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import MODEL_PATH
from serving import SECRET, Serve, cli, environment

from ragsync.operator_key import KEY_FILE, OperatorKeys


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def old_operator_key(secret: str) -> str:
    """How the operator key used to be derived: anyone with the session secret had it, for ever."""
    return hmac.new(secret.encode(), b"ragsync operator v1", hashlib.sha256).hexdigest()


def test_each_home_has_its_own_random_key_in_a_private_file(tmp_path: Path) -> None:
    first, second = OperatorKeys(tmp_path / "a"), OperatorKeys(tmp_path / "b")
    key = first.current()

    assert key == first.current(), "stable until it expires or is rotated"
    assert key != second.current() and len(key) == 64
    assert not first.accepts(second.current()) and first.accepts(key)
    assert os.stat(tmp_path / "a" / KEY_FILE).st_mode & 0o777 == 0o600


def test_a_key_expires_and_the_next_command_renews_it(tmp_path: Path) -> None:
    clock = Clock()
    keys = OperatorKeys(tmp_path, ttl_s=60, clock=clock)
    old = keys.current()
    clock.now += 59.9
    assert keys.accepts(old)
    clock.now += 0.1
    assert not keys.accepts(old), "expired: refused"
    new = keys.current()
    assert new != old and keys.accepts(new) and not keys.accepts(old)


def test_rotation_refuses_the_previous_key_at_once_even_in_a_reader_that_cached_it(tmp_path: Path) -> None:
    server_side = OperatorKeys(tmp_path)
    old = OperatorKeys(tmp_path).current()
    assert server_side.accepts(old)
    rotated = OperatorKeys(tmp_path).rotate()
    assert not server_side.accepts(old) and server_side.accepts(rotated.key)


def test_a_key_file_other_accounts_can_read_or_a_bad_one_is_never_accepted(tmp_path: Path) -> None:
    keys = OperatorKeys(tmp_path)
    key = keys.current()
    path = tmp_path / KEY_FILE
    path.chmod(0o644)
    assert not keys.accepts(key), "readable by others: not a credential"
    assert keys.current() != key and os.stat(path).st_mode & 0o777 == 0o600, "the next command replaces it"
    for body in (b"", b"{", b'{"key": "short", "created_at": 0, "expires_at": 4e9}', b'{"key": "' + b"k" * 64 + b'"}'):
        path.write_bytes(body)
        assert keys.read() is None and not keys.accepts("short") and not keys.accepts("k" * 64)
    path.write_text(json.dumps({"key": "k" * 64, "created_at": 0, "expires_at": float("nan")}))
    assert not keys.accepts("k" * 64), "NaN is not a time: refused"
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text(json.dumps({"key": "k" * 64, "created_at": 0, "expires_at": 4e9}))
    (tmp_path / "elsewhere").chmod(0o600)
    assert not keys.accepts("k" * 64), "never through a link"


def test_commands_renewing_at_once_agree_on_one_key(tmp_path: Path) -> None:
    found: list[str] = []
    barrier = threading.Barrier(8)

    def renew() -> None:
        barrier.wait()
        found.append(OperatorKeys(tmp_path).current())

    threads = [threading.Thread(target=renew) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(found)) == 1 and OperatorKeys(tmp_path).accepts(found[0])


@pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")
def test_serve_takes_only_the_home_s_current_key_and_commands_keep_working(tmp_path: Path) -> None:
    env = environment(tmp_path / "home")
    with Serve(env) as serve:

        def status(key: str) -> int:
            return httpx.get(f"{serve.api}/v1/owner/status", headers={"X-Ragsync-Operator": key}).status_code

        def cli_status_works() -> bool:
            return bool(json.loads(cli(env, "status").stdout)["owner"]["pid"] == serve.pid)

        # Derived from the session secret, the key was the same for every home sharing that secret.
        assert status(old_operator_key(SECRET)) == 401
        assert status("") == 401
        key = OperatorKeys(serve.home).current()
        assert status(key) == 200 and cli_status_works()

        # Rotated: the previous key is refused at once, commands go on with the new one.
        rotated = cli(env, "operator", "rotate").stdout
        assert "the previous one is refused" in rotated and key not in rotated, "the key is never printed"
        assert status(key) == 401 and cli_status_works()
        assert status(OperatorKeys(serve.home).current()) == 200

        # Expired: refused by serve; the next command makes a new one and goes on.
        expired = OperatorKeys(serve.home, ttl_s=1, clock=lambda: time.time() - 10).rotate()
        assert status(expired.key) == 401 and cli_status_works()
        assert OperatorKeys(serve.home).current() != expired.key
    assert "Traceback" not in serve.output()

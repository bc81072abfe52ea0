"""`ragsync ask` at its edges: an empty home, and as-of values with the API's rules (exit 2, one line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragsync.cli import main


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(tmp_path / "no-model"),
        "RAGSYNC_SESSION_SECRET": "ask-cli",
        "RAGSYNC_CONFIG": os.devnull,
    }


def invoke(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


def test_ask_on_an_empty_home_says_so(env: dict[str, str], tmp_path: Path) -> None:
    code, output = invoke(env, "ask", "What is the refund window?", "--token", "anything")

    assert code == 1
    assert output.strip() == (
        f"error: nothing is indexed in {tmp_path / 'home'} yet: run `ragsync sync <folder>` first, "
        "or point --home / RAGSYNC_HOME at an existing home"
    )
    assert not (tmp_path / "home").exists(), "asking must not create a home"


@pytest.mark.parametrize(
    ("as_of", "says"),
    [
        pytest.param("0001-01-01T00:00:00+14:00", "is out of range", id="no-utc-instant"),
        pytest.param("2999-01-01", "is in the future", id="future"),
        pytest.param("next tuesday", "expected YYYY-MM-DD or an ISO 8601 date and time", id="unreadable"),
        pytest.param("2026-02-30", "expected YYYY-MM-DD", id="no-such-day"),
    ],
)
def test_bad_as_of_exits_2_with_the_reason(env: dict[str, str], as_of: str, says: str) -> None:
    code, output = invoke(env, "ask", "q", "--token", "t", "--as-of", as_of)

    assert code == 2
    (line,) = output.splitlines()
    assert line.startswith("error: ") and "--as-of" in line and says in line

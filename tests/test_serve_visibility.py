"""Every failure is visible where an operator of `ragsync serve` looks (issue 20 item 2): its log, `ragsync
status` and /readyz. Through real serve processes, model loaded.

- each pass of a declared source logs one INFO line (counts, duration) and one WARNING line per
  problem (the document and why); `status` lists the latest pass's problems per source; /readyz
  stays 200 but says "degraded" and names the source (never a document: anyone may call it);
- a source that cannot work at all (two sources with one name, a missing path, a file given as a
  folder, a git ref that does not resolve) stops serve at start, one line each, exit 2;
- the reason of a 401 is in serve's log (never the token, never the caller's body);
- 404 and 405 answer in the API's error shape, {"error", "message"}.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import jwt
import pytest
from conftest import MODEL_PATH
from serving import SECRET, Serve, cli, environment
from waiting import wait_until

pytestmark = pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")

HOOK = "hook-secret-of-the-crm"


def drive_with_problems(root: Path) -> Path:
    """One good document and three problems: a bad date, a corrupt PDF, a broken manifest."""
    (root / "acme/policies").mkdir(parents=True)
    (root / "acme/payroll").mkdir(parents=True)
    (root / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (root / "acme/policies/refunds.md").write_text("# Refunds\n\nCustomers have 30 days to request a refund.\n")
    (root / "acme/policies/parking.md").write_text(
        "---\neffective_from: 2026-02-30\n---\n# Parking\n\nStaff park on level 3.\n"
    )
    (root / "acme/policies/travel.pdf").write_bytes(b"%PDF-1.4 not really a PDF\n")
    (root / "acme/payroll/.ragsync-acl.toml").write_text('read = ["group:payroll"\n')  # unclosed array
    (root / "acme/payroll/bands.md").write_text("# Bands\n\nSenior engineers are in band 5.\n")
    return root


def test_pass_problems_are_logged_listed_by_status_and_degrade_readyz(tmp_path: Path) -> None:
    drive = drive_with_problems(tmp_path / "drive")
    config = tmp_path / "ragsync.toml"
    config.write_text(
        f'[[sources]]\nname = "docs"\npath = "{drive}"\ntenants = ["acme"]\nwatch = true\ninterval_s = 600\n'
    )
    env = environment(
        tmp_path / "home",
        RAGSYNC_CONFIG=str(config),
        RAGSYNC_WEBHOOKS=json.dumps({"crm": {"secret": HOOK, "tenants": ["acme"]}}),
    )
    with Serve(env) as serve:
        status = wait_until(
            lambda: (s := json.loads(cli(env, "status", "--json").stdout))["sources"] and s, 60, "a pass"
        )
        (docs,) = status["sources"]
        assert docs["source"] == "docs" and docs["failed"] is None and docs["errors"] == 3, docs
        problems = docs["problems"]
        assert len(problems) == 3, problems
        for name in ("acme/policies/parking.md", "acme/policies/travel.pdf", "acme/payroll/.ragsync-acl.toml"):
            assert any(name in p for p in problems), (name, problems)
        assert any("invalid effective_from '2026-02-30'" in p for p in problems)

        # The log: one line for the pass with its counts and duration, one WARNING per problem.
        log = wait_until(
            lambda: "problems, deletions held back in" in (out := serve.output()) and out, 30, "the pass line"
        )
        pass_lines = [line for line in log.splitlines() if line.startswith("INFO ragsync.sources: full pass of docs")]
        assert pass_lines and "1 upserts" in pass_lines[0] and "3 problems" in pass_lines[0], pass_lines
        warnings = [line for line in log.splitlines() if line.startswith("WARNING ragsync.sources: source docs: ")]
        assert len(warnings) == 3 and any("travel.pdf: not a readable PDF" in w for w in warnings), warnings

        # /readyz: still 200 (restarting serve would fix nothing), degraded, the source named, no document.
        ready = serve.http.get("/readyz")
        assert ready.status_code == 200
        body = ready.json()
        assert body["status"] == "degraded" and list(body["degraded"]) == ["docs"], body
        assert "problem" in body["degraded"]["docs"]
        assert not any(word in ready.text for word in ("parking", "travel", "payroll", "effective_from"))

        # Mounted at the root, the webhook app answers unknown paths: in the API's error shape too.
        missing = serve.http.get("/no/such/path")
        assert missing.status_code == 404 and set(missing.json()) == {"error", "message"}, missing.text
        wrong = serve.http.get("/v1/webhooks/crm")
        assert wrong.status_code == 405 and wrong.json()["error"] == "method not allowed", wrong.text

        # Fixed at the source: the next pass has no problem, and /readyz is plainly ready again.
        (drive / "acme/policies/parking.md").write_text(
            "---\neffective_from: 2026-02-28\n---\n# Parking\n\nStaff park on level 3.\n"
        )
        (drive / "acme/policies/travel.pdf").unlink()
        # Fixed, and within what the root grants (a manifest may only narrow: issue 18).
        (drive / "acme/payroll/.ragsync-acl.toml").write_text('read = ["group:staff"]\n')
        healed = wait_until(lambda: (b := serve.ready())["status"] == "ready" and b, 60, "a clean pass")
        assert healed["degraded"] == {}
        (docs,) = json.loads(cli(env, "status", "--json").stdout)["sources"]
        assert docs["problems"] == [] and docs["errors"] == 0
    assert "Traceback" not in serve.output()


def git_repo(path: Path) -> Path:
    path.mkdir()
    (path / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (path / "home.md").write_text("# Home\n\nThe wiki.\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "wiki"], check=True)
    return path


def test_unusable_sources_stop_serve_at_start_one_line_each(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    wiki = git_repo(tmp_path / "wiki")
    config = tmp_path / "ragsync.toml"
    env = environment(tmp_path / "home", RAGSYNC_CONFIG=str(config))

    config.write_text(
        f'[[sources]]\nname = "docs"\npath = "{good}"\ntenants = ["acme"]\n\n'
        f'[[sources]]\nname = "docs"\npath = "{wiki}"\ntenants = ["acme"]\n'
    )
    twice = cli(env, "serve", "--port", "0", check=False, timeout=60)
    assert twice.returncode == 2 and "Traceback" not in twice.stderr, twice.stderr
    assert twice.stderr.splitlines() == [
        f"error: {config}: sources is invalid: sources[0] and sources[1] are both named 'docs':"
        " every source needs a name of its own (the namespace of its doc IDs)"
    ]

    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder\n")
    config.write_text(
        f'[[sources]]\nname = "good"\npath = "{good}"\ntenants = ["acme"]\n\n'
        f'[[sources]]\nname = "gone"\npath = "{tmp_path / "nowhere"}"\ntenants = ["acme"]\n\n'
        f'[[sources]]\nname = "file"\npath = "{a_file}"\ntenants = ["acme"]\n\n'
        f'[[sources]]\nname = "wiki"\nkind = "git"\npath = "{wiki}"\nref = "mian"\ntenants = ["acme"]\n'
    )
    bad = cli(env, "serve", "--port", "0", check=False, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    lines = bad.stderr.splitlines()
    assert len(lines) == 3, lines
    assert lines[0] == f"error: {config}: sources[1] (gone): path {tmp_path / 'nowhere'} does not exist"
    assert lines[1] == f"error: {config}: sources[2] (file): path {a_file} is a file, not a folder"
    assert lines[2].startswith(f"error: {config}: sources[3] (wiki): {wiki}: cannot resolve ref 'mian' to a commit")
    assert not (tmp_path / "home" / "owner.lock").exists()  # refused before taking the home


@pytest.mark.filterwarnings("ignore::jwt.InsecureKeyLengthWarning")  # the suite's short shared secret
def test_a_refused_token_says_why_in_the_log_and_unknown_routes_answer_in_the_error_shape(tmp_path: Path) -> None:
    env = environment(tmp_path / "home")
    now = int(time.time())
    claims = {"sub": "ann", "tenant": "acme", "groups": "staff", "iat": now, "exp": now + 600, "aud": "ragsync"}
    kid = {"kid": "default"}
    groups_as_string = jwt.encode(claims, SECRET, "HS256", headers=kid)
    stale = {**claims, "groups": ["staff"], "iat": now - 7200, "exp": now - 3600}
    expired = jwt.encode(stale, SECRET, "HS256", headers=kid)
    with Serve(env) as serve:
        answers = [
            serve.http.post("/v1/ask", json={"question": "q?"}, headers={"Authorization": f"Bearer {tok}"})
            for tok in (groups_as_string, expired)
        ]
        # The caller learns nothing about why: one body for every refusal.
        assert [(a.status_code, a.json()) for a in answers] == [(401, {"error": "invalid token"})] * 2

        log = wait_until(lambda: "token expired" in (out := serve.output()) and out, 10, "the 401 reasons")
        assert "WARNING ragsync.api: 401 for POST /v1/ask: groups must be a list of strings" in log
        assert "WARNING ragsync.api: 401 for POST /v1/ask: token expired" in log
        assert groups_as_string not in log and expired not in log
        assert groups_as_string.split(".")[2] not in log  # not even the signature

        missing = serve.http.get("/no/such/path")
        assert missing.status_code == 404
        assert missing.json() == {
            "error": "not found",
            "message": "GET /no/such/path: no such endpoint (the API is described at /openapi.json)",
        }
        wrong = serve.http.get("/v1/ask")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
        assert wrong.json() == {"error": "method not allowed", "message": "GET /v1/ask: not allowed; use POST"}
        assert httpx.get(f"{serve.api}/healthz").json() == {"status": "ok"}

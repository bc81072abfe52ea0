"""The operator console and /docs, in a real browser (headless Chromium) against a real `ragsync serve`:
each page shows what it must (a source row, an SVG histogram, a deletion certificate, an answer with a
quote and its trace), the console answers only to the home's operator key (never to an asker's
token, a forged cookie or a cross-site form), and /docs renders Swagger UI with every request on
127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from browser import chromium, missing, requested_urls
from conftest import MODEL_PATH
from serving import Serve, cli, environment, token

from ragsync.demo import build_drive

pytestmark = pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")

SALARY_Q = "What is the salary band for a senior engineer?"
REFUND_Q = "How many days do customers have to request a refund?"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A serve that synced the demo drive, applied a revocation and a deletion."""
    root = tmp_path_factory.mktemp("console")
    drive = root / "drive"
    build_drive(drive)
    env = environment(root / "home")
    with Serve(env) as serve:
        cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
        (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
        cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
        (drive / "acme/hr/salaries.md").unlink()
        cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
        serve.wait_drained()
        yield {"serve": serve, "env": env, "key": operator_key(serve.home)}


def operator_key(home: Path) -> str:
    return str(json.loads((home / "operator.key").read_text())["key"])


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    why = missing()
    if why is not None:
        if os.environ.get("RAGSYNC_REQUIRE_SERVICES") == "1":
            pytest.fail(why)
        pytest.skip(why)
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def log_in(driver: Any, api: str, key: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{api}/console/login")
    driver.find_element(By.NAME, "key").send_keys(key)
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.CSS_SELECTOR, "form button").click()
    # The click returns before the form post's redirect has loaded: wait for it, then check where it went.
    with contextlib.suppress(TimeoutException):
        WebDriverWait(driver, 30).until(lambda d: not d.current_url.rstrip("/").endswith("/console/login"))
    assert driver.current_url.rstrip("/").endswith("/console"), driver.current_url


def wait_for(driver: Any, css: str, timeout_s: float = 60) -> Any:
    """The element once the page that holds it loaded (a form post answers after the ask ran)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout_s).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))
    except TimeoutException:
        raise AssertionError(
            f"no {css} on {driver.current_url}:\n{driver.find_element(By.TAG_NAME, 'body').text}"
        ) from None


def test_the_console_refuses_anyone_but_the_operator(served: dict[str, Any]) -> None:
    serve, key = served["serve"], served["key"]
    asker = token("acme", "hal", "staff", "hr")
    pages = [
        "/console",
        "/console/propagation",
        "/console/deletions",
        "/console/ask",
        "/console/certificate?doc=acme/hr/salaries.md",
    ]
    with httpx.Client(base_url=serve.api, timeout=60) as http:
        for path in pages:
            for headers in (
                {},
                {"Authorization": f"Bearer {asker}"},
                {"X-Ragsync-Operator": asker},
                {"Authorization": "Bearer " + "0" * 64},
            ):
                refused = http.get(path, headers=headers)
                assert refused.status_code == 401, (path, headers, refused.status_code)
                assert "salaries" not in refused.text and "acme" not in refused.text
            assert http.get(path, headers={"Authorization": f"Bearer {key}"}).status_code == 200, path
        forged = http.get("/console", cookies={"ragsync_console": "9999999999." + "0" * 64})
        assert forged.status_code == 401
        # An asker's token cannot log in, nor ask through the console (it sees no trace).
        assert http.post("/console/login", data={"key": asker}).status_code == 401
        posted = http.post(
            "/console/ask", data={"token": asker, "question": SALARY_Q}, headers={"Authorization": f"Bearer {asker}"}
        )
        assert posted.status_code == 403 and "trace" not in posted.text.lower()

        login = http.post("/console/login", data={"key": key})
        assert login.status_code == 303
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
        session = {"ragsync_console": login.cookies["ragsync_console"]}
        assert http.get("/console", cookies=session).status_code == 200
        # A form post with the session but without its CSRF token, or from another origin, is refused.
        form = {"token": asker, "question": SALARY_Q}
        assert http.post("/console/ask", data=form, cookies=session).status_code == 403
        page = http.get("/console/ask", cookies=session).text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None
        form["csrf"] = csrf.group(1)
        elsewhere = http.post("/console/ask", data=form, cookies=session, headers={"Origin": "https://evil.example"})
        assert elsewhere.status_code == 403
        assert http.post("/console/ask", data=form, cookies=session).status_code == 200


def test_overview_shows_sources_backlog_and_tenants(served: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, served["serve"].api, served["key"])
    sources = browser.find_element(By.CSS_SELECTOR, "table.sources").text
    assert "drive" in sources and "full" in sources, sources
    backlog = browser.find_element(By.CSS_SELECTOR, "table.backlog").text
    for topic in ("acl", "deletions", "documents"):
        assert topic in backlog
    assert "globex" in browser.find_element(By.TAG_NAME, "main").text


def test_propagation_draws_an_svg_histogram(served: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, served["serve"].api, served["key"])
    browser.get(f"{served['serve'].api}/console/propagation")
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.histogram")
    assert len(charts) == 2 and all(c.is_displayed() for c in charts)
    heights = [float(r.get_attribute("height")) for r in charts[1].find_elements(By.CSS_SELECTOR, "rect.bar")]
    assert sum(1 for h in heights if h > 0) >= 1, heights  # the revocation and the deletion converged
    percentiles = browser.find_element(By.CSS_SELECTOR, "table.percentiles").text
    assert "converged" in percentiles and "delete/converged" in percentiles and "acl/converged" in percentiles


def test_deletions_link_to_a_printable_certificate(served: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    api = served["serve"].api
    log_in(browser, api, served["key"])
    browser.get(f"{api}/console/deletions")
    row = browser.find_element(By.CSS_SELECTOR, "table.deletions tbody tr")
    assert "acme/hr/salaries.md" in row.text
    row.find_element(By.LINK_TEXT, "certificate").click()
    cert = wait_for(browser, ".certificate").text  # the click returns before the page loads
    assert "Deletion certificate" in cert and "acme/hr/salaries.md" in cert
    copies = browser.find_element(By.CSS_SELECTOR, "table.copies").text
    assert "embedding cache" in copies or "event log" in copies, copies
    assert "Remnants found now: 0" in browser.find_element(By.TAG_NAME, "main").text


def test_ask_page_shows_the_answer_with_quotes_and_the_trace(served: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    api = served["serve"].api
    log_in(browser, api, served["key"])
    browser.get(f"{api}/console/ask")
    browser.find_element(By.NAME, "token").send_keys(token("acme", "ann", "staff"))
    browser.find_element(By.NAME, "question").send_keys(REFUND_Q)
    browser.find_element(By.CSS_SELECTOR, "main form button").click()
    answer = wait_for(browser, "section.answer")
    quotes = answer.find_elements(By.CSS_SELECTOR, "blockquote.quote")
    assert quotes and any("30" in q.text for q in quotes), answer.text
    assert "refunds.md" in answer.text
    trace = browser.find_element(By.CSS_SELECTOR, "details pre").text
    assert "refunds.md" in trace and "30 days" not in trace  # IDs, never text
    # The deleted document is gone for its former readers too.
    browser.get(f"{api}/console/ask")
    browser.find_element(By.NAME, "token").send_keys(token("acme", "hal", "staff", "hr", "hr-leads"))
    browser.find_element(By.NAME, "question").send_keys(SALARY_Q)
    browser.find_element(By.CSS_SELECTOR, "main form button").click()
    assert "90,000" not in wait_for(browser, "section.answer").text


def test_docs_render_offline_from_local_assets(served: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    api = served["serve"].api
    html = httpx.get(f"{api}/docs", timeout=30).text
    assets = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: ?'([^']+)'", html)
    assert assets and all(a.startswith("/") and not a.startswith("//") for a in assets), assets
    for asset in assets:
        assert httpx.get(f"{api}{asset}", timeout=30).status_code == 200, asset
    requested_urls(browser)  # drain what earlier pages requested
    browser.get(f"{api}/docs")
    WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".swagger-ui .opblock")))
    assert "/v1/ask" in browser.find_element(By.CSS_SELECTOR, ".swagger-ui").text
    hosts = {urlsplit(u).hostname for u in requested_urls(browser) if urlsplit(u).scheme in ("http", "https")}
    assert hosts == {"127.0.0.1"}, hosts

"""The HTTP API over a real embedded QueryWorker (SQLite FTS5 store, extractive model).

What matters at this boundary: scope comes only from the signed token (no body field can name a
tenant, user or group), every token failure looks the same, a refusal never says why, the model
being down is a 503 rather than a fake abstention, the metrics count what happened (served to
operators only, see test_server.py), and the OpenAPI document describes what is validated.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import raw_asgi
from conftest import NOW, make_passage
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from starlette.testclient import TestClient

from indexer.ports import Hit, StoreUnavailable
from indexer.sqlite_fts import SqliteLexicalIndex
from query.api import create_app
from query.extractive import ExtractiveModel
from query.ports import Model, ModelTurn, ModelUnavailable, ToolCall
from query.retrieval import Retriever
from query.tokens import issue_token
from query.worker import QueryWorker
from schemas.decisions import GENERIC_ABSTENTION
from schemas.principal import AccessFilter, Principal

SECRET = "s3cret"
STAFF = Principal(tenant="acme", user="ann", groups=("staff",))
OUTSIDER = Principal(tenant="acme", user="bob", groups=("contractors",))
REFUNDS = "Refunds are paid within 14 days of the request."
SALARIES = "Salary bands are reviewed every April by the board."
QUESTION = "When are refunds paid?"


class ExplodingModel:
    """A model whose failure carries passage text, to prove the API does not log it."""

    name = "exploding"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def decide(self, turn: ModelTurn) -> ToolCall:
        raise self.error


@pytest.fixture
def lexical(tmp_path: Path) -> Iterator[SqliteLexicalIndex]:
    index = SqliteLexicalIndex(tmp_path / "lexical.db")
    index.upsert(
        [
            make_passage(REFUNDS, doc_id="refunds.md", acl=("group:staff",), heading_path=("Refunds",)),
            make_passage(SALARIES, doc_id="salaries.md", acl=("group:hr",), heading_path=("Salaries",)),
        ]
    )
    yield index
    index.close()


def client_with(lexical: SqliteLexicalIndex, model: Model) -> TestClient:
    worker = QueryWorker(Retriever(lexical, None, None, None), model, SECRET)
    return TestClient(create_app(lambda: worker))


@pytest.fixture
def client(lexical: SqliteLexicalIndex) -> Iterator[TestClient]:
    with client_with(lexical, ExtractiveModel()) as c:
        yield c


def bearer(principal: Principal, secret: str = SECRET, ttl_s: int = 3600, now: float | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(secret, principal, ttl_s=ttl_s, now=now)}"}


def metric(client: TestClient, sample: str) -> float:
    text = generate_latest(client.app.state.registry).decode()  # type: ignore[attr-defined]
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    assert match, f"{sample} missing from /metrics"
    return float(match.group(1))


def test_answered_request_returns_only_the_public_result(client: TestClient) -> None:
    response = client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF))

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"answered", "answer", "claims", "message"}
    assert body["answered"] is True and body["message"] is None
    assert body["claims"] == [
        {
            "statement": REFUNDS,
            "quote": REFUNDS,
            "passage_id": "refunds.md@1#root-1",
            "source_url": "file:///refunds.md",
            "location": None,  # a Markdown file has no pages or rows
        }
    ]


def test_as_of_before_the_document_existed_abstains(client: TestClient) -> None:
    as_of = (NOW - timedelta(days=60)).isoformat()
    response = client.post("/v1/ask", json={"question": QUESTION, "as_of": as_of}, headers=bearer(STAFF))

    assert response.status_code == 200
    assert response.json() == {"answered": False, "answer": None, "claims": [], "message": GENERIC_ABSTENTION}


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="missing"),
        pytest.param({"Authorization": "Basic YW5uOnB3"}, id="not-bearer"),
        pytest.param({"Authorization": "Bearer not-a-token"}, id="malformed"),
        pytest.param(bearer(STAFF, secret="someone-elses-secret"), id="forged"),
        pytest.param(bearer(STAFF, ttl_s=60, now=time.time() - 3600), id="expired"),
    ],
)
def test_bad_tokens_get_one_generic_401(client: TestClient, headers: dict[str, str]) -> None:
    response = client.post("/v1/ask", json={"question": QUESTION}, headers=headers)

    assert response.status_code == 401
    assert response.json() == {"error": "invalid token"}
    assert response.headers["www-authenticate"] == "Bearer"
    assert metric(client, "ragsync_asks_total") == 0


def test_tampered_token_claims_get_401(client: TestClient) -> None:
    header, body, signature = issue_token(SECRET, OUTSIDER).split(".")
    staff_body = issue_token(SECRET, STAFF).split(".")[1]
    response = client.post(
        "/v1/ask", json={"question": QUESTION}, headers={"Authorization": f"Bearer {header}.{staff_body}.{signature}"}
    )

    assert body != staff_body
    assert response.status_code == 401 and response.json() == {"error": "invalid token"}


@pytest.mark.parametrize("field", ["tenant", "user", "groups", "group"])
def test_scope_fields_in_the_body_are_rejected(client: TestClient, field: str) -> None:
    response = client.post("/v1/ask", json={"question": QUESTION, field: "hr"}, headers=bearer(STAFF))

    assert response.status_code == 422
    assert response.json()["problems"] == [
        {
            "field": field,
            "error": "extra_forbidden",
            "message": "unknown field: the body holds only question and as_of (who asks comes from the token)",
        }
    ]
    assert metric(client, "ragsync_asks_total") == 0


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        pytest.param(b'{"as_of": null}', "missing", id="no-question"),
        pytest.param(b'{"question": 42}', "string_type", id="question-not-string"),
        pytest.param(b'{"question": "   "}', "string_too_short", id="blank-question"),
        pytest.param(b'{"question": "q", "as_of": "2999-01-01T00:00:00Z"}', "value_error", id="future-as-of"),
        pytest.param(b'{"question": "q", "as_of": "2999-01-01"}', "value_error", id="future-date"),
        pytest.param(b'{"question": "q", "as_of": "last week"}', "value_error", id="bad-as-of"),
        pytest.param(b'{"question": "q", "as_of": "0001-01-01T00:00:00+14:00"}', "value_error", id="no-utc-instant"),
        pytest.param(b'{"question": "q", "as_of": "2026-02-30"}', "value_error", id="no-such-day"),
        pytest.param(b'{"question": "q", "as_of": 20260115}', "value_error", id="number-as-of"),
        pytest.param(b"question=q", "json_invalid", id="not-json"),
    ],
)
def test_malformed_bodies_are_422(client: TestClient, payload: bytes, problem: str) -> None:
    headers = {**bearer(STAFF), "Content-Type": "application/json"}
    response = client.post("/v1/ask", content=payload, headers=headers)

    assert response.status_code == 422
    assert [p["error"] for p in response.json()["problems"]] == [problem]


def test_oversized_body_is_413(client: TestClient) -> None:
    response = client.post("/v1/ask", json={"question": "refunds " * 20000}, headers=bearer(STAFF))

    assert response.status_code == 413


@pytest.mark.parametrize("declared", [b"\xb2", b"1\xb9"])
def test_a_content_length_in_other_digits_is_not_a_500(client: TestClient, declared: bytes) -> None:
    """'²' (b"\xb2" read as latin-1) passes str.isdigit() and fails int(): it was a 500 with a traceback."""
    body = b'{"question": "When are refunds paid?"}'
    headers = [(k.encode(), v.encode()) for k, v in bearer(STAFF).items()]
    assert client.portal is not None
    status, answer = client.portal.call(
        raw_asgi.post, client.app, "/v1/ask", [*headers, (b"content-length", declared)], body
    )

    assert status == 200, answer


def test_principal_without_access_gets_the_generic_abstention(client: TestClient) -> None:
    denied = client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(OUTSIDER))
    hidden = client.post("/v1/ask", json={"question": "When are salary bands reviewed?"}, headers=bearer(STAFF))
    absent = client.post("/v1/ask", json={"question": "What is the parking policy?"}, headers=bearer(STAFF))

    expected: dict[str, object] = {"answered": False, "answer": None, "claims": [], "message": GENERIC_ABSTENTION}
    assert [r.status_code for r in (denied, hidden, absent)] == [200, 200, 200]
    # Denied, hidden from this asker, and nonexistent are indistinguishable.
    assert denied.json() == hidden.json() == absent.json() == expected
    assert REFUNDS not in denied.text and SALARIES not in hidden.text


def test_metrics_count_answers_abstentions_and_rejections(client: TestClient) -> None:
    client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF))
    client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF))
    client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(OUTSIDER))
    client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF, secret="forged"))
    client.post("/v1/ask", json={"question": QUESTION, "tenant": "globex"}, headers=bearer(STAFF))

    text = generate_latest(client.app.state.registry).decode()  # type: ignore[attr-defined]
    assert "# TYPE ragsync_asks_total counter" in text
    assert "# TYPE ragsync_ask_latency_seconds histogram" in text
    assert metric(client, "ragsync_asks_total") == 3
    assert metric(client, "ragsync_asks_answered_total") == 2
    assert metric(client, 'ragsync_asks_abstained_total{reason="no_visible_evidence"}') == 1
    assert metric(client, 'ragsync_asks_abstained_total{reason="citation_check_failed"}') == 0
    assert metric(client, 'ragsync_ask_rejected_total{reason="unauthorized"}') == 1
    assert metric(client, 'ragsync_ask_rejected_total{reason="invalid_request"}') == 1
    assert metric(client, "ragsync_ask_latency_seconds_count") == 3
    assert metric(client, "ragsync_ask_latency_seconds_sum") > 0
    assert metric(client, 'ragsync_ask_latency_seconds_bucket{le="+Inf"}') == 3  # buckets: a p95 can be computed


def test_model_unavailable_is_503_not_an_abstention(lexical: SqliteLexicalIndex) -> None:
    with client_with(lexical, ExplodingModel(ModelUnavailable("anthropic API returned HTTP 529"))) as client:
        response = client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF))

        assert response.status_code == 503
        assert response.json() == {"error": "model unavailable"}
        assert response.headers["retry-after"] == "5"
        assert metric(client, 'ragsync_ask_errors_total{kind="model_unavailable"}') == 1
        assert metric(client, "ragsync_asks_answered_total") == 0


def test_unexpected_errors_are_500_and_log_no_passage_text(
    lexical: SqliteLexicalIndex, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with client_with(lexical, ExplodingModel(ValueError(f"cannot parse {REFUNDS}"))) as client:
        response = client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF))

        assert response.status_code == 500 and response.json() == {"error": "internal error"}
        assert metric(client, 'ragsync_ask_errors_total{kind="internal"}') == 1
    assert any("ValueError" in r.getMessage() for r in caplog.records if r.name == "ragsync.api")
    assert all(REFUNDS not in r.getMessage() and r.exc_info is None for r in caplog.records)


def test_answer_path_logs_ids_but_no_passage_text(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="ragsync.trace")  # a CLI run earlier in the process quiets it
    response = client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF))

    assert response.json()["answered"] is True
    messages = [r.getMessage() for r in caplog.records]
    assert any("refunds.md@1#root-1" in m for m in messages)  # the worker's trace, IDs only
    assert all(REFUNDS not in m for m in messages)


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_as_of_takes_a_date_like_the_cli(client: TestClient) -> None:
    before = client.post("/v1/ask", json={"question": QUESTION, "as_of": "2026-01-01"}, headers=bearer(STAFF))
    after = client.post("/v1/ask", json={"question": QUESTION, "as_of": "2026-06-01"}, headers=bearer(STAFF))

    # The passage is effective from NOW - 30 days (2026-05-02): a date before abstains, a date after answers.
    assert before.status_code == after.status_code == 200
    assert before.json()["answered"] is False and after.json()["answered"] is True


def test_a_bad_as_of_has_a_message_for_people(client: TestClient) -> None:
    response = client.post(
        "/v1/ask", json={"question": QUESTION, "as_of": "0001-01-01T00:00:00+14:00"}, headers=bearer(STAFF)
    )

    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid request"
    (problem,) = body["problems"]
    assert problem["field"] == "as_of" and "out of range" in problem["message"]
    assert body["message"].startswith("as_of: ")


def test_the_future_is_refused_with_a_message(client: TestClient) -> None:
    response = client.post("/v1/ask", json={"question": QUESTION, "as_of": "2999-01-01"}, headers=bearer(STAFF))

    assert response.status_code == 422
    assert "in the future" in response.json()["problems"][0]["message"]


def test_openapi_describes_the_validated_request(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()

    operation = spec["paths"]["/v1/ask"]["post"]
    body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body_schema == {"$ref": "#/components/schemas/AskRequest"}
    ask_request = spec["components"]["schemas"]["AskRequest"]
    assert set(ask_request["properties"]) == {"question", "as_of"}
    assert ask_request["additionalProperties"] is False and ask_request["required"] == ["question"]
    assert {"format": "date", "type": "string"} in ask_request["properties"]["as_of"]["anyOf"]
    assert set(operation["responses"]) >= {"200", "401", "413", "422", "503"}
    assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/AskResponse")
    assert "bearer" in str(spec["components"]["securitySchemes"]).lower()
    assert set(spec["paths"]) >= {"/v1/ask", "/healthz", "/readyz"}


def test_interactive_docs(client: TestClient) -> None:
    response = client.get("/docs")

    assert response.status_code == 200 and "/openapi.json" in response.text


def test_the_openapi_request_schema_is_the_validator() -> None:
    """The documented schema is generated from AskRequest, the model every body is validated with."""
    from query.api import AskRequest

    schema = AskRequest.model_json_schema()
    assert schema["properties"]["question"]["maxLength"] == 4000
    with pytest.raises(ValueError):
        AskRequest.model_validate_json(b'{"question": "q", "tenant": "globex"}')


def test_metrics_are_not_served_to_askers(client: TestClient) -> None:
    assert client.get("/metrics").status_code == 404


def test_readyz_runs_the_checks(lexical: SqliteLexicalIndex) -> None:
    worker = QueryWorker(Retriever(lexical, None, None, None), ExtractiveModel(), SECRET)
    state = {"indexer": "catching up: 12 events behind"}
    app = create_app(lambda: worker, checks={"indexer": lambda: state["indexer"] or None})
    with TestClient(app) as c:
        waiting = c.get("/readyz")
        state["indexer"] = ""
        ready = c.get("/readyz")

    assert waiting.status_code == 503
    assert waiting.json() == {
        "status": "not ready",
        "checks": {"query_worker": "ok", "indexer": "catching up: 12 events behind"},
    }
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


class _GoneStore(SqliteLexicalIndex):
    """A lexical store whose server stopped answering after it was opened."""

    def search(self, query: str, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        raise StoreUnavailable("Elasticsearch could not answer a search: HTTP 503 search_phase_execution_exception")


def test_a_store_that_cannot_answer_is_503_not_an_abstention_or_500(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gone = _GoneStore(tmp_path / "gone.db")
    try:
        with client_with(gone, ExtractiveModel()) as client:
            response = client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF))
            assert response.status_code == 503 and response.json() == {"error": "store unavailable"}
            assert response.headers["retry-after"] == "5"
            assert metric(client, 'ragsync_ask_errors_total{kind="store_unavailable"}') == 1
            assert metric(client, "ragsync_asks_answered_total") == 0
        assert all(QUESTION not in r.getMessage() for r in caplog.records)
    finally:
        gone.close()


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)  # any text but lone surrogates


@given(answer=_TEXT, quote=_TEXT, url=_TEXT, answered=st.booleans())
@settings(max_examples=200, deadline=None)
def test_the_answer_body_is_what_json_response_gave(answer: str, quote: str, url: str, answered: bool) -> None:
    """answer_response serialises with pydantic instead of model_dump() + JSONResponse (cheaper under
    load): a client must see the same bytes, escapes and non-ASCII included."""
    from starlette.responses import JSONResponse

    from query.api import AskResponse, answer_response
    from query.worker import AskResult, CitedClaim
    from schemas.decisions import Trace

    trace = Trace(run_id="r", tenant="acme", user="ann", groups=["staff"], as_of=NOW)
    claims = [CitedClaim(answer, quote, "doc.md@1#a", url)] if answered else []
    result = AskResult(answered, answer if answered else None, claims, None if answered else GENERIC_ABSTENTION, trace)
    response = answer_response(result)
    before = JSONResponse(AskResponse.model_validate(result.public()).model_dump())
    assert response.body == before.body
    assert response.headers["content-type"] == before.headers["content-type"]


class CountingModel:
    """The extractive model, holding each decision for a moment and counting the decisions under way."""

    name = "counting"

    def __init__(self) -> None:
        import threading

        self.inner = ExtractiveModel()
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def decide(self, turn: ModelTurn) -> ToolCall:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.05)
            return self.inner.decide(turn)
        finally:
            with self.lock:
                self.now -= 1


@pytest.mark.parametrize("ask_threads", [1, 3])
def test_ask_threads_bounds_the_questions_answered_at_once(lexical: SqliteLexicalIndex, ask_threads: int) -> None:
    """ask_threads questions at most run at once; the others wait their turn and are answered all the same."""
    from concurrent.futures import ThreadPoolExecutor

    model = CountingModel()
    worker = QueryWorker(Retriever(lexical, None, None, None), model, SECRET)
    with TestClient(create_app(lambda: worker, ask_threads=ask_threads)) as client:

        def ask(_: int) -> int:
            return client.post("/v1/ask", json={"question": QUESTION}, headers=bearer(STAFF)).status_code

        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(ask, range(16)))
    assert codes == [200] * 16
    assert model.most == ask_threads

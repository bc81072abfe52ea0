"""Webhook source: signed pushes become durable events in the real SQLite event log, exactly once."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import raw_asgi
from starlette.applications import Starlette
from starlette.testclient import TestClient

from connectors.state import ConnectorState, DocRecord
from connectors.webhook import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookSource,
    create_webhook_app,
    sign,
    signed_headers,
)
from schemas.events import AclPayload, DeletePayload, Event, EventKind, UpsertPayload, make_event_id
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DOCUMENTS
from streams.sqlite_log import SqliteEventLog

SECRET = "s3cret-shared-with-the-pusher"
CRM_SECRET = "another-pusher-s-own-secret"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TS = int(NOW.timestamp())
SOURCE = "kb"
SOURCES = {
    "kb": WebhookSource(SECRET, frozenset({"acme", "globex"})),
    "crm": WebhookSource(CRM_SECRET, frozenset({"acme"})),
}

REFUNDS: dict[str, Any] = {
    "action": "upsert",
    "tenant": "acme",
    "doc_id": "kb/refunds",
    "content": "---\neffective_from: 2026-01-01\n---\n# Refund policy\n\nWithin 30 days.\n",
    "acl": ["group:staff", "group:finance", "group:staff"],
    "source_url": "https://kb.example/refunds",
}


@dataclass
class Hook:
    client: TestClient
    log: SqliteEventLog
    state: ConnectorState
    fail_publish: list[Exception]
    sequence: int = 0

    def push(
        self,
        body: dict[str, Any] | bytes,
        *,
        source: str = "kb",
        signature: str | None = None,
        at: int = TS,
    ) -> Any:
        """Signed at `at`; a dict without `sequence` gets the next one (each push a new change)."""
        if isinstance(body, dict) and "sequence" not in body:
            self.sequence += 1
            body = {**body, "sequence": self.sequence}
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        secret = SOURCES[source].secret if source in SOURCES else SECRET
        headers = {TIMESTAMP_HEADER: str(at), SIGNATURE_HEADER: signature or sign(secret, raw, at)}
        if signature == "":
            headers[SIGNATURE_HEADER] = ""
        return self.client.post(f"/v1/webhooks/{source}", content=raw, headers=headers)

    def events(self, topic: str) -> list[Event]:
        records = self.log.poll(topic, f"test-{uuid.uuid4().hex}", max_records=1000)
        return [Event.model_validate_json(r.value) for r in records]

    def all_events(self) -> list[Event]:
        return [e for topic in (TOPIC_DOCUMENTS, TOPIC_ACL, TOPIC_DELETIONS) for e in self.events(topic)]

    def record(self, tenant: str = "acme", doc_id: str = "kb/refunds", source: str = SOURCE) -> DocRecord | None:
        """Read on the loop's thread, the only one that may use the state's connection."""
        assert self.client.portal is not None
        return self.client.portal.call(self.state.get, source, tenant, doc_id)


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[Hook]:
    log = SqliteEventLog(tmp_path / "events.db")
    fail_publish: list[Exception] = []

    def publish(event: Event) -> None:
        if fail_publish:
            raise fail_publish.pop(0)
        log.publish(event)

    # The webhook app is mounted into a larger app, as `ragsync serve` does, and the state is opened
    # on the event loop's thread: ConnectorState's SQLite connection belongs to its opening thread.
    server = Starlette()
    with TestClient(server) as client:
        assert client.portal is not None
        state = client.portal.call(ConnectorState, tmp_path / "connectors.db")
        server.mount("", create_webhook_app(publish, SOURCES, state, now=lambda: NOW, max_body_bytes=64 * 1024))
        yield Hook(client, log, state, fail_publish)
        client.portal.call(state.close)
    log.close()


def upsert(event: Event) -> UpsertPayload:
    assert isinstance(event.payload, UpsertPayload)
    return event.payload


def test_signed_upsert_is_published_to_the_documents_topic_before_202(hook: Hook) -> None:
    response = hook.push(REFUNDS)
    assert response.status_code == 202, response.text
    [event] = hook.events(TOPIC_DOCUMENTS)
    assert response.json() == {"status": "published", "event_id": event.event_id, "version": 1, "kind": "upsert"}
    assert event.event_id == make_event_id(SOURCE, "acme", "kb:kb/refunds", 1, EventKind.UPSERT)
    assert (event.kind, event.tenant, event.doc_id, event.version, event.source, event.occurred_at) == (
        EventKind.UPSERT,
        "acme",
        "kb:kb/refunds",  # namespaced by the source in the URL
        1,
        SOURCE,
        NOW,
    )
    payload = upsert(event)
    assert payload.acl == ("group:finance", "group:staff"), "sorted and deduplicated, as scanned sources"
    assert payload.content == REFUNDS["content"]
    assert payload.content_type == "markdown"
    assert payload.title == "Refund policy", "stated in the content"
    assert payload.effective_from == datetime(2026, 1, 1, tzinfo=UTC), "stated in the content"
    assert payload.source_url == "https://kb.example/refunds"
    assert hook.events(TOPIC_ACL) == [] and hook.events(TOPIC_DELETIONS) == []
    record = hook.record()
    assert record is not None and (record.version, record.acl, record.deleted) == (1, payload.acl, False)


def test_given_title_and_date_win_over_the_content(hook: Hook) -> None:
    body = {**REFUNDS, "title": "Refunds (EU)", "effective_from": "2026-04-01T00:00:00+02:00", "content_type": "text"}
    assert hook.push(body).status_code == 202
    [event] = hook.events(TOPIC_DOCUMENTS)
    payload = upsert(event)
    assert (payload.title, payload.content_type) == ("Refunds (EU)", "text")
    assert payload.effective_from == datetime(2026, 3, 31, 22, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "sha256=" + "0" * 64,
        sign("another-secret", json.dumps(REFUNDS).encode(), TS),
        sign(SECRET, json.dumps(REFUNDS).encode(), TS).replace("sha256=", "sha1="),
        sign(SECRET, json.dumps({**REFUNDS, "tenant": "globex"}).encode(), TS),  # signed a different body
        sign(SECRET, json.dumps({**REFUNDS, "sequence": 1}).encode(), TS + 1),  # signed another timestamp
    ],
)
def test_bad_signature_is_401_and_nothing_is_published(hook: Hook, signature: str) -> None:
    response = hook.push(REFUNDS, signature=signature)
    assert response.status_code == 401
    assert SIGNATURE_HEADER in response.json()["error"]
    assert hook.all_events() == [] and hook.record() is None


def test_signature_hex_is_case_insensitive(hook: Hook) -> None:
    raw = json.dumps({**REFUNDS, "sequence": 1}).encode()
    assert hook.push(raw, signature=sign(SECRET, raw, TS).upper().replace("SHA256=", "sha256=")).status_code == 202


def test_replay_is_an_idempotent_no_op(hook: Hook) -> None:
    first = hook.push(REFUNDS).json()
    reordered_acl = {**REFUNDS, "acl": ["group:finance", "group:staff"]}
    for body in (REFUNDS, reordered_acl):
        response = hook.push(body)
        assert response.status_code == 200
        assert response.json() == {"status": "unchanged", "event_id": None, "version": 1, "kind": "upsert"}
    assert [e.event_id for e in hook.all_events()] == [first["event_id"]]

    changed = hook.push({**REFUNDS, "content": REFUNDS["content"].replace("30", "45")})
    assert changed.status_code == 202 and changed.json()["version"] == 2
    dated = hook.push({**REFUNDS, "content": REFUNDS["content"].replace("30", "45"), "effective_from": "2026-06-01"})
    assert dated.json()["version"] == 3, "a new date outside the content is a change too, not a replay"
    assert [(e.version, e.kind) for e in hook.events(TOPIC_DOCUMENTS)] == [(1, "upsert"), (2, "upsert"), (3, "upsert")]


def test_acl_push_goes_to_the_acl_topic(hook: Hook) -> None:
    hook.push(REFUNDS)
    response = hook.push({"action": "acl", "tenant": "acme", "doc_id": "kb/refunds", "acl": ["user:ceo", "group:hr"]})
    assert response.status_code == 202
    [event] = hook.events(TOPIC_ACL)
    assert response.json() == {"status": "published", "event_id": event.event_id, "version": 2, "kind": "acl"}
    assert event.payload == AclPayload(acl=("group:hr", "user:ceo"))
    assert len(hook.events(TOPIC_DOCUMENTS)) == 1

    same = hook.push({"action": "acl", "tenant": "acme", "doc_id": "kb/refunds", "acl": ["group:hr", "user:ceo"]})
    assert same.status_code == 200 and same.json()["status"] == "unchanged"
    # An upsert push whose content is unchanged but whose readers differ is an ACL event too.
    response = hook.push({**REFUNDS, "acl": ["group:staff"]})
    assert response.json()["kind"] == "acl" and response.json()["version"] == 3
    assert [e.payload for e in hook.events(TOPIC_ACL)][-1] == AclPayload(acl=("group:staff",))

    unknown = hook.push({"action": "acl", "tenant": "acme", "doc_id": "kb/other", "acl": []})
    assert unknown.status_code == 404 and "push an upsert first" in unknown.json()["error"]


def test_delete_push_goes_to_the_deletions_topic_and_versions_continue(hook: Hook) -> None:
    hook.push(REFUNDS)
    response = hook.push({"action": "delete", "tenant": "acme", "doc_id": "kb/refunds", "reason": "archived"})
    assert response.status_code == 202
    [event] = hook.events(TOPIC_DELETIONS)
    assert response.json() == {"status": "published", "event_id": event.event_id, "version": 2, "kind": "delete"}
    assert event.payload == DeletePayload(reason="archived")
    record = hook.record()
    assert record is not None and record.deleted

    again = hook.push({"action": "delete", "tenant": "acme", "doc_id": "kb/refunds"})
    assert again.status_code == 200 and again.json()["status"] == "unchanged"
    never = hook.push({"action": "delete", "tenant": "acme", "doc_id": "kb/never-seen"})
    assert never.status_code == 200 and never.json()["version"] is None
    assert len(hook.events(TOPIC_DELETIONS)) == 1

    back = hook.push(REFUNDS)
    assert back.status_code == 202 and back.json()["version"] == 3, "a returning document continues its versions"


def test_tenant_and_source_are_part_of_the_identity(hook: Hook) -> None:
    assert hook.push(REFUNDS).json()["version"] == 1
    assert hook.push({**REFUNDS, "tenant": "globex"}).json()["version"] == 1
    other = hook.push(REFUNDS, source="crm")
    assert other.status_code == 202
    assert {(e.source, e.doc_id) for e in hook.events(TOPIC_DOCUMENTS)} == {
        ("kb", "kb:kb/refunds"),
        ("crm", "crm:kb/refunds"),
    }
    assert hook.push(REFUNDS, source="bad name").status_code == 404
    assert hook.push(REFUNDS, source="unconfigured").status_code == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({**REFUNDS, "groups": ["group:staff"]}, "upsert.groups: Extra inputs are not permitted"),
        ({"action": "acl", "tenant": "acme", "doc_id": "d", "acl": [], "content": "x"}, "acl.content: Extra inputs"),
        (b'{"action": "upsert", ', "Invalid JSON"),
        (b"[1, 2]", "Input should be an object"),
        ({k: v for k, v in REFUNDS.items() if k != "action"}, "discriminator 'action'"),
        ({**REFUNDS, "effective_from": "next week"}, "upsert.effective_from: invalid effective_from 'next week'"),
        ({**REFUNDS, "action": "rename"}, "'upsert', 'acl', 'delete'"),
        ({k: v for k, v in REFUNDS.items() if k != "acl"}, "upsert.acl: Field required"),
        ({**REFUNDS, "acl": ["staff"]}, "upsert.acl[0]: String should match pattern"),
        ({**REFUNDS, "tenant": "acme corp"}, "upsert.tenant"),
        ({**REFUNDS, "doc_id": ""}, "upsert.doc_id"),
        ({**REFUNDS, "sequence": "7"}, "upsert.sequence: Input should be a valid integer"),  # strict: no coercion
        (json.dumps(REFUNDS).encode(), "upsert.sequence: Field required"),
        ({**REFUNDS, "sequence": -1}, "upsert.sequence"),
        ({**REFUNDS, "content_type": "pdf"}, "upsert.content_type"),
        ({**REFUNDS, "content": "---\neffective_from: 2026-13-01\n---\n# x\n"}, "2026-13-01"),
        ({**REFUNDS, "effective_from": "0001-01-01T00:00:00+14:00"}, "is out of range"),  # was HTTP 500
        ({**REFUNDS, "content": "---\neffective_from: 0001-01-01T00:00:00+14:00\n---\n# x\n"}, "out of range"),
        # Control characters reached every log line naming the document (issue 18: NUL and newline).
        ({**REFUNDS, "doc_id": "kb/\x00x"}, "upsert.doc_id: contains the control character U+0000 at position 3"),
        ({**REFUNDS, "doc_id": "kb/a\nWARNING forged"}, "upsert.doc_id: contains the control character U+000A"),
        ({**REFUNDS, "doc_id": "kb/\u2028x"}, "upsert.doc_id: contains the control character U+2028"),
        ({"action": "acl", "tenant": "acme", "doc_id": "a\rb", "acl": [], "sequence": 1}, "acl.doc_id: contains"),
        ({"action": "delete", "tenant": "acme", "doc_id": "a\x85", "sequence": 1}, "delete.doc_id: contains"),
        ({**REFUNDS, "acl": ["group:staff\x00"]}, "upsert.acl[0]: String should match pattern"),
        ({**REFUNDS, "tenant": "acme\n"}, "upsert.tenant: String should match pattern"),
    ],
)
def test_invalid_push_is_422_with_a_clear_message(hook: Hook, body: dict[str, Any] | bytes, message: str) -> None:
    response = hook.push(body)
    assert response.status_code == 422
    assert response.json()["error"].startswith("invalid push: ")
    assert message in response.json()["error"]
    assert hook.all_events() == []


def test_oversized_body_is_413(hook: Hook) -> None:
    response = hook.push({**REFUNDS, "content": "x" * (65 * 1024)})
    assert response.status_code == 413 and hook.all_events() == []


def test_a_content_length_in_other_digits_is_not_a_500(hook: Hook) -> None:
    raw = json.dumps({**REFUNDS, "sequence": 1}).encode()
    signed = [(k.encode(), v.encode()) for k, v in signed_headers(SECRET, raw, TS).items()]
    assert hook.client.portal is not None
    status, body = hook.client.portal.call(
        raw_asgi.post, hook.client.app, "/v1/webhooks/kb", [*signed, (b"content-length", b"\xb2")], raw
    )
    assert status == 202, body


def test_publish_failure_is_503_and_leaves_state_so_the_retry_publishes(hook: Hook) -> None:
    hook.fail_publish.append(ConnectionError("log unavailable"))
    response = hook.push(REFUNDS)
    assert response.status_code == 503
    assert "retry" in response.json()["error"] and "log unavailable" in response.json()["error"]
    assert hook.record() is None and hook.all_events() == []

    retry = hook.push(REFUNDS)
    assert retry.status_code == 202
    [event] = hook.events(TOPIC_DOCUMENTS)
    assert (retry.json()["event_id"], retry.json()["version"]) == (event.event_id, 1)

    hook.fail_publish.append(OSError("disk full"))
    assert hook.push({"action": "delete", "tenant": "acme", "doc_id": "kb/refunds"}).status_code == 503
    record = hook.record()
    assert record is not None and not record.deleted and record.version == 1


def test_sequence_refuses_late_deliveries_instead_of_reverting(hook: Hook) -> None:
    v17 = {**REFUNDS, "sequence": 17}
    v18 = {**REFUNDS, "content": "# Refund policy\n\nWithin 60 days.\n", "sequence": 18}
    assert hook.push(v18).status_code == 202
    late = hook.push(v17)  # delivered after a newer one: a retry of an earlier push
    assert late.status_code == 409
    assert late.json()["status"] == "stale" and "sequence 17 is not above 18" in late.json()["error"]
    replay = hook.push(v18)
    assert replay.status_code == 409 and replay.json()["status"] == "stale", "a replay inside the window: refused"
    conflicting = hook.push({**v18, "content": "# other\n"})
    assert conflicting.status_code == 409, "one sequence, two contents: refused"

    assert hook.push({"action": "delete", "tenant": "acme", "doc_id": "kb/refunds", "sequence": 19}).status_code == 202
    assert hook.push(v18).status_code == 409, "a delayed upsert must not resurrect a deleted document"
    assert hook.push({**v18, "sequence": 20}).json()["version"] == 3
    record = hook.record()
    assert record is not None and record.fingerprint == "20", "the high-water mark is kept"
    assert [(e.version, e.kind) for e in hook.all_events()] == [(1, "upsert"), (3, "upsert"), (2, "delete")]


def test_concurrent_pushes_for_one_document_get_distinct_versions(tmp_path: Path) -> None:
    """The second push reaches the handler while the first is inside publish (barriers, not sleeps):
    the first publish waits until the second has read the clock, which it does before the document's
    lock, so both requests are in the handler at the same time whatever the machine's speed."""
    log = SqliteEventLog(tmp_path / "events.db")
    first_publishing, second_inside = threading.Event(), threading.Event()

    def now() -> datetime:
        if first_publishing.is_set():
            second_inside.set()
        return NOW

    def publish(event: Event) -> None:
        if not first_publishing.is_set():
            first_publishing.set()
            assert second_inside.wait(30), "the second push never reached the handler"
        log.publish(event)

    server = Starlette()
    results: list[int] = []
    with TestClient(server) as client:
        assert client.portal is not None
        state = client.portal.call(ConnectorState, tmp_path / "connectors.db")
        server.mount("", create_webhook_app(publish, SOURCES, state, now=now))
        hook = Hook(client, log, state, [])

        def push(n: int) -> None:
            if n == 1:  # the second arrives while the first is still publishing; sequences in order
                assert first_publishing.wait(30), "the first push never published"
            results.append(hook.push({**REFUNDS, "content": f"# v{n}\n", "sequence": n + 1}).json()["version"])

        threads = [threading.Thread(target=push, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        client.portal.call(state.close)
    assert second_inside.is_set()
    assert sorted(results) == [1, 2]
    assert sorted(e.version for e in hook.events(TOPIC_DOCUMENTS)) == [1, 2]
    log.close()


def test_empty_or_short_secret_and_no_tenant_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="secret"):
        WebhookSource("", frozenset({"acme"}))
    with pytest.raises(ValueError, match="secret"):
        WebhookSource("short", frozenset({"acme"}))
    with pytest.raises(ValueError, match="tenant"):
        WebhookSource(SECRET, frozenset())
    state = ConnectorState(tmp_path / "c.db")
    with pytest.raises(ValueError, match="no webhook source"):
        create_webhook_app(lambda e: None, {}, state)
    with pytest.raises(ValueError, match="invalid webhook source name"):
        create_webhook_app(lambda e: None, {"Bad Name": SOURCES["kb"]}, state)
    state.close()


def test_each_source_signs_with_its_own_secret_for_its_own_tenants(hook: Hook) -> None:
    raw = json.dumps(REFUNDS).encode()
    stolen = hook.push(raw, source="crm", signature=sign(SECRET, raw, TS))
    assert stolen.status_code == 401, "kb's secret signs nothing for crm"
    other_tenant = hook.push({**REFUNDS, "tenant": "globex"}, source="crm")
    assert other_tenant.status_code == 403 and "may not push for tenant 'globex'" in other_tenant.json()["error"]
    assert hook.all_events() == []


def test_a_pushed_doc_id_never_leaves_the_source_namespace(hook: Hook) -> None:
    for doc_id in ("drive:acme/hr/salaries.md", "acme/hr/salaries.md", "crm:kb/refunds"):
        assert hook.push({**REFUNDS, "doc_id": doc_id}).status_code == 202
    assert sorted(e.doc_id for e in hook.events(TOPIC_DOCUMENTS)) == [
        "kb:acme/hr/salaries.md",
        "kb:crm:kb/refunds",
        "kb:drive:acme/hr/salaries.md",
    ]


def test_a_replayed_upsert_cannot_undo_a_revocation(hook: Hook) -> None:
    """Issue 8 item 5: replaying an old signed upsert after an ACL push published the old ACL again (202)."""
    captured = json.dumps({**REFUNDS, "sequence": 1}).encode()
    assert hook.push(captured).status_code == 202
    revoke = {"action": "acl", "tenant": "acme", "doc_id": "kb/refunds", "acl": ["group:hr"], "sequence": 2}
    assert hook.push(revoke).status_code == 202
    before = hook.all_events()

    inside = hook.push(captured, at=TS)  # the same bytes and headers, inside the window
    assert inside.status_code == 409 and inside.json()["status"] == "stale"
    later = hook.push(captured, at=TS, signature=sign(SECRET, captured, TS))
    assert later.status_code == 409
    assert hook.all_events() == before, "a refused push is never published"
    record = hook.record()
    assert record is not None and record.acl == ("group:hr",)


@pytest.mark.parametrize("offset_s", [-301, 301, -86_400, 10**9])
def test_a_push_signed_outside_the_window_is_refused_as_a_replay(hook: Hook, offset_s: int) -> None:
    response = hook.push({**REFUNDS, "sequence": 1}, at=TS + offset_s)
    assert response.status_code == 409 and response.json()["status"] == "replay"
    assert "outside ±300 s" in response.json()["error"]
    assert hook.all_events() == [] and hook.record() is None
    assert hook.push({**REFUNDS, "sequence": 1}, at=TS + 299).status_code == 202, "inside the window"


@pytest.mark.parametrize(
    "timestamp",
    # b"\xb2" reaches the app as '²' (uvicorn passes header bytes, Starlette reads them as latin-1),
    # which str.isdigit() accepts and int() rejects: it was an unauthenticated HTTP 500.
    [b"", b"yesterday", b"-5", b"1.5", b"9" * 13, b"\xb2", f"{TS}".encode() + b"\xb3", b"1_000", b"1 2"],
)
def test_a_missing_or_malformed_timestamp_is_401(hook: Hook, timestamp: bytes) -> None:
    raw = json.dumps({**REFUNDS, "sequence": 1}).encode()
    headers = [(TIMESTAMP_HEADER.encode(), timestamp), (SIGNATURE_HEADER.encode(), sign(SECRET, raw, TS).encode())]
    assert hook.client.portal is not None
    status, body = hook.client.portal.call(raw_asgi.post, hook.client.app, "/v1/webhooks/kb", headers, raw)
    assert status == 401 and TIMESTAMP_HEADER in json.loads(body)["error"]
    assert hook.all_events() == []


def test_a_retry_after_a_failed_publish_is_accepted_with_its_sequence(hook: Hook) -> None:
    hook.fail_publish.append(ConnectionError("log down"))
    body = {**REFUNDS, "sequence": 5}
    assert hook.push(body).status_code == 503
    assert hook.push(body).status_code == 202, "nothing was published, so the same sequence is still new"
    assert hook.push(body).status_code == 409

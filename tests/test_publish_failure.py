"""A publish whose acknowledgement was lost: the state does not advance, and its version is never reused.

In a broker restart the records of a batch can be written while the acknowledgement never arrives:
the publisher sees a failure although the events are in the log. The connector state then rightly
does not advance (the next sync re-emits), but the re-emission must not carry the same version:
two different events under one version let the stale one win, here freezing a revocation. The log
is the real embedded one; only the lost acknowledgement is injected (the records are appended, then
the publish raises), as tests/test_broker_restart_publish.py produces it on a real broker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import MODEL_PATH

from connectors.drive import DriveConnector
from indexer.ports import StoreUnavailable
from query.tokens import issue_token
from ragsync.pipeline import sync_source
from ragsync.settings import Settings
from ragsync.verify import verify
from ragsync.wiring import build
from schemas.principal import Principal

CANARY = "zqvlostack"


def test_a_publish_with_a_lost_ack_never_reuses_its_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drive = tmp_path / "drive"
    (drive / "acme/vault").mkdir(parents=True)
    (drive / "acme/.ragsync-acl.toml").write_text(
        'tenant = "acme"\nread = ["group:staff"]\n[folders."vault"]\nread = ["group:staff", "group:hr"]\n'
    )
    (drive / "acme/vault/.ragsync-acl.toml").write_text('read = ["group:staff", "group:hr"]\n')
    secret = drive / "acme/vault/secret.md"
    secret.write_text(f"# Vault\n\nThe vault code word is {CANARY} one.\n")
    settings = Settings(home=tmp_path / "home", embed_model_path=MODEL_PATH, session_secret="p" * 32)
    components = build(settings)
    try:
        assert sync_source(components, DriveConnector(drive, tenants=["acme"])).scan.upserts == 1

        # An edit is published, lands in the log, and its acknowledgement is lost.
        secret.write_text(f"# Vault\n\nThe vault code word is {CANARY} two.\n")
        events = components.events
        real = events.publish_many

        def ack_lost(batch: Any) -> None:
            real(batch)
            raise StoreUnavailable("the broker restarted before acknowledging")

        monkeypatch.setattr(events, "publish_many", ack_lost)
        with pytest.raises(StoreUnavailable):
            sync_source(components, DriveConnector(drive, tenants=["acme"]), apply=False)
        monkeypatch.setattr(events, "publish_many", real)

        # Then the vault is narrowed to HR: the next sync re-emits the edit under the new ACL.
        (drive / "acme/vault/.ragsync-acl.toml").write_text('read = ["group:hr"]\n')
        again = sync_source(components, DriveConnector(drive, tenants=["acme"]))
        assert again.scan.upserts == 1 and again.scan.errors == []

        worker = components.query_worker()
        ann = issue_token(settings.secret(), Principal(tenant="acme", user="ann", groups=("staff",)))
        hal = issue_token(settings.secret(), Principal(tenant="acme", user="hal", groups=("hr",)))
        question = f"What is the vault code word {CANARY}?"
        # Before the fix both events were version 2: the unacknowledged one (staff may read) was applied
        # and the revoking one was then stale, so ann kept reading the vault.
        assert not worker.ask_with_token(ann, question).answered, "the revocation must hold"
        answer = worker.ask_with_token(hal, question).answer or ""
        assert f"{CANARY} two" in answer, answer
        report = verify(components)
        assert report.drift == [] and report.pending == [], report.as_dict()
    finally:
        components.close()

"""A real DokuWiki (Debian's package under php -S) as a source: the index never allows what the wiki denies.

Each test starts a private wiki (tests/dokuwiki_world.py) and syncs it through the real connector,
pipeline and stores (embedded profile). The equivalence test compares, for every (page, user) pair,
the store's own permission query with that user's token entries against the wiki's own decision
(`wiki.aclCheck` through the API at the start and the end; DokuWiki's same `auth_aclcheck` run by
PHP on the wiki's files after each of 100 random edits made through the API, and checked equal to
the API's answers): zero pairs wider, and every stricter pair named by the sync report.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from dokuwiki_world import Population, Wiki, populate, random_edit
from starlette.testclient import TestClient

from connectors.dokuwiki import DokuWikiConnector, DokuWikiError, doc_path
from connectors.scan import ScanReport
from query.tokens import issue_token
from ragsync.pipeline import sync_source
from ragsync.server import server_app
from ragsync.settings import Settings
from ragsync.sources import SourceSettings, connector_for
from ragsync.wiring import Components, build
from schemas.events import qualify_doc_id
from schemas.principal import AccessFilter, Principal

SOURCE, TENANT = "wiki", "acme"
COUNTS = {"pairs": 0, "wider": 0, "stricter": 0, "stricter_reported": 0, "edits": 0}


def _components(tmp_path: Path) -> Components:
    return build(Settings(home=tmp_path / "home", embed_model_path=None, session_secret="s"))


def _connector(wiki: Wiki, tmp_path: Path) -> DokuWikiConnector:
    settings = SourceSettings(
        name=SOURCE,
        kind="dokuwiki",
        url=wiki.url,
        username="ragsync-admin",
        password=wiki.client._password,
        tenants=(TENANT,),
    )
    connector = connector_for(settings, tmp_path)
    assert isinstance(connector, DokuWikiConnector)
    return connector


def index_allows(
    components: Components, page: str, user: str, groups: frozenset[str], ids: list[str] | None = None
) -> bool:
    """The stores' own permission query (the lexical store of record) for this user's token entries."""
    if ids is None:
        ids = [p.passage_id for p in components.lexical.inventory(TENANT, qualify_doc_id(SOURCE, doc_path(page)))]
    entries = tuple(sorted({f"user:{user}", *(f"group:{g}" for g in groups)}))
    return bool(ids) and bool(components.lexical.passages(AccessFilter(TENANT, entries, datetime.now(UTC)), ids))


def compare(
    components: Components, report: ScanReport, decisions: dict[tuple[str, str], int], users: dict[str, frozenset[str]]
) -> list[str]:
    """Every pair: wider fails at once; stricter pairs are returned, each with whether the report named it."""
    stricter: list[str] = []
    narrowed = {line.split(": ", 1)[0] for line in report.narrowed}
    held: dict[str, list[str]] = {}
    for (page, user), level in decisions.items():
        if page not in held:
            doc_id = qualify_doc_id(SOURCE, doc_path(page))
            held[page] = [p.passage_id for p in components.lexical.inventory(TENANT, doc_id)]
        COUNTS["pairs"] += 1
        got, want = index_allows(components, page, user, users[user], held[page]), level >= 1
        if got and not want:
            COUNTS["wider"] += 1
            pytest.fail(f"the index lets {user} {sorted(users[user])} read {page}; the wiki says {level}")
        if want and not got:
            COUNTS["stricter"] += 1
            reported = doc_path(page) in narrowed
            COUNTS["stricter_reported"] += reported
            stricter.append(f"{page} {user} reported={reported}")
    return stricter


def test_the_index_equals_the_wiki_pair_by_pair_through_100_random_edits(wiki: Wiki, tmp_path: Path) -> None:
    rng = random.Random(19)
    population: Population = populate(wiki, rng, users=22, pages=60, rules=45)
    components = _components(tmp_path)
    connector = _connector(wiki, tmp_path)
    try:
        report = sync_source(components, connector).scan
        assert not report.errors, report.errors
        users = wiki.users()
        assert len(users) >= 20 and len({g for gs in users.values() for g in gs}) >= 6
        pages = wiki.pages()
        by_api = wiki.api_decisions(pages, sorted(users))
        assert wiki.php_decisions(pages, sorted(users)) == by_api, "the PHP oracle is the API's aclCheck"
        assert {v >= 1 for v in by_api.values()} == {True, False}, "a population where some read and some do not"
        assert compare(components, report, by_api, users) == []
        for serial in range(100):
            what = random_edit(wiki, rng, population, serial)
            report = sync_source(components, connector).scan
            assert not report.errors, (what, report.errors)
            users, pages = wiki.users(), wiki.pages()
            stricter = compare(components, report, wiki.php_decisions(pages, sorted(users)), users)
            assert all(s.endswith("reported=True") for s in stricter), (what, stricter)
            COUNTS["edits"] += 1
        by_api = wiki.api_decisions(pages, sorted(users))
        assert wiki.php_decisions(pages, sorted(users)) == by_api
        assert not [s for s in compare(components, report, by_api, users) if s.endswith("reported=False")]
    finally:
        components.close()
    assert COUNTS["wider"] == 0 and COUNTS["pairs"] >= 100 * 60 * 20
    print(f"\ndokuwiki equivalence: {json.dumps(COUNTS)}")


def _ask(client: TestClient, user: str, groups: tuple[str, ...], question: str) -> str:
    token = issue_token("s", Principal(tenant=TENANT, user=user, groups=groups))
    response = client.post("/v1/ask", json={"question": question}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return json.dumps(response.json())


def test_revocation_deletion_and_rename_in_the_wiki_reach_answers(wiki: Wiki, tmp_path: Path) -> None:
    wiki.create_user("ann", ["hr", "user"])
    wiki.create_user("bob", ["eng", "user"])
    wiki.create_user("cat", ["hr", "user"])
    wiki.put("hr:salaries", "====== Salary bands ======\n\nThe senior salary band is zanzibar-90000.\n")
    wiki.put("hr:leave", "====== Leave policy ======\n\nParental leave is quokka-26 weeks.\n")
    wiki.grant("hr:*", "@hr", 1)
    wiki.grant("hr:*", "@user", 0)
    components = _components(tmp_path)
    connector = _connector(wiki, tmp_path)
    try:
        sync_source(components, connector)
        client = TestClient(server_app(components))
        assert "zanzibar-90000" in _ask(client, "ann", ("hr", "user"), "senior salary band zanzibar")
        assert "zanzibar-90000" not in _ask(client, "bob", ("eng", "user"), "senior salary band zanzibar")

        wiki.set_groups("ann", ["user"])  # ann leaves hr in the wiki (and her token's groups follow)
        sync_source(components, connector)
        assert "zanzibar-90000" not in _ask(client, "ann", ("user",), "senior salary band zanzibar")
        assert "zanzibar-90000" in _ask(client, "cat", ("hr", "user"), "senior salary band zanzibar")
        wiki.grant("hr:salaries", "ann", 1)  # a page rule for her alone
        sync_source(components, connector)
        assert "zanzibar-90000" in _ask(client, "ann", ("user",), "senior salary band zanzibar")
        wiki.revoke("hr:salaries", "ann")
        sync_source(components, connector)
        assert "zanzibar-90000" not in _ask(client, "ann", ("user",), "senior salary band zanzibar")
        wiki.grant("hr:leave", "@ALL", 1)  # anyone, even readers the wiki does not know: not expressible
        report = sync_source(components, connector).scan
        (line,) = [n for n in report.narrowed if n.startswith("hr/leave: ")]
        assert "lets in readers it does not name" in line and "@ALL" in line
        assert "quokka-26" in _ask(client, "bob", ("eng", "user"), "parental leave quokka"), "known users: each granted"
        assert "quokka-26" not in _ask(client, "zed", ("guests",), "parental leave quokka"), "unknown: stricter"
        wiki.revoke("hr:leave", "@ALL")

        wiki.put("hr:archive:leave", str(wiki.client.call("wiki.getPage", "hr:leave")))  # the rename
        wiki.put("hr:leave", "")
        report = sync_source(components, connector).scan
        assert report.deletes == 1 and report.upserts == 1
        answer = _ask(client, "cat", ("hr", "user"), "parental leave quokka")
        assert "wiki:hr/archive/leave" in answer and 'wiki:hr/leave"' not in answer
        wiki.put("hr:archive:leave", "")  # the deletion
        sync_source(components, connector)
        assert "quokka-26" not in _ask(client, "cat", ("hr", "user"), "parental leave quokka")
        assert (
            components.docs.get(TENANT, "wiki:hr/archive/leave") is None
            or components.docs.get(TENANT, "wiki:hr/archive/leave").deleted
        )  # type: ignore[union-attr]
    finally:
        components.close()


def test_an_unreachable_wiki_fails_the_pass_in_one_line_and_deletes_nothing(wiki: Wiki, tmp_path: Path) -> None:
    wiki.put("ops:runbook", "====== Runbook ======\n\nRestart with walrus-7.\n")
    components = _components(tmp_path)
    connector = _connector(wiki, tmp_path)
    try:
        sync_source(components, connector)
        wiki.stop()
        with pytest.raises(DokuWikiError) as failed:
            sync_source(components, connector)
        assert "cannot be reached" in str(failed.value) and "\n" not in str(failed.value)
        assert "pw-test" not in str(failed.value), "never the password"
        state: Any = components.docs.get(TENANT, "wiki:ops/runbook")
        assert state is not None and not getattr(state, "deleted", False)
        assert components.lexical.inventory(TENANT, "wiki:ops/runbook"), "nothing deleted"
    finally:
        components.close()


def test_permissions_that_cannot_be_read_make_every_page_readable_by_nobody(wiki: Wiki, tmp_path: Path) -> None:
    wiki.put("eng:design", "====== Design ======\n\nThe codename is pangolin-3.\n")
    components = _components(tmp_path)
    connector = _connector(wiki, tmp_path)
    try:
        sync_source(components, connector)
        assert index_allows(components, "eng:design", "ragsync-admin", frozenset({"admin"}))
        # The wiki's account loses its superuser right (it may still use the API and read pages):
        # neither the ACL rules nor the users can be read any more.
        with (wiki.conf / "local.php").open("a") as local:
            local.write("$conf['superuser'] = '@nobody';\n")
        report = sync_source(components, connector).scan
        assert any("permissions cannot be read" in e for e in report.errors), report.errors
        assert report.locked == 1 and report.deletes == 0
        assert not index_allows(components, "eng:design", "ragsync-admin", frozenset({"admin", "user"}))
    finally:
        components.close()


def test_a_dokuwiki_source_is_declared_with_url_credentials_one_tenant_and_principals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {
        "name": "intranet",
        "kind": "dokuwiki",
        "url": "http://127.0.0.1:9",
        "username": "bot",
        "tenants": ("acme",),
    }
    with pytest.raises(ValueError, match="exactly one of password, password_env"):
        SourceSettings(**base)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`user` is now `username`"):  # one name for dokuwiki and smb
        SourceSettings(**{**{k: v for k, v in base.items() if k != "username"}, "user": "bot", "password": "x"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exactly one tenant"):
        SourceSettings(**{**base, "password": "x", "tenants": ("acme", "globex")})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not path"):
        SourceSettings(**{**base, "password": "x", "path": tmp_path})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r'write the tables users and groups, e\.g\. .*groups = \{ "hr" = "people" \}'):
        SourceSettings(**{**base, "password": "x", "principals": {"@hr": "group:people"}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="apply to kind = 'dokuwiki' only"):
        SourceSettings(name="d", path=tmp_path, tenants=("acme",), url="http://x")
    source = SourceSettings(
        **{**base, "password_env": "WIKI_PW", "principals": {"groups": {"hr": "people"}, "users": {"eve": ""}}}  # type: ignore[arg-type]
    )
    assert "hunter2" not in repr(SourceSettings(**{**base, "password": "hunter2"}))  # type: ignore[arg-type]
    monkeypatch.delenv("WIKI_PW", raising=False)
    with pytest.raises(ValueError, match="WIKI_PW"):
        connector_for(source, tmp_path)
    monkeypatch.setenv("WIKI_PW", "s3cret-from-env")
    connector = connector_for(source, tmp_path)
    assert isinstance(connector, DokuWikiConnector) and "s3cret" not in repr(connector.client)
    assert connector.principals.group("hr") == "group:people" and connector.principals.group("ops") == "group:ops"
    assert connector.principals.user("eve") is None and connector.principals.user("ann") == "user:ann"
    with pytest.raises(DokuWikiError, match="cannot be reached"):  # nothing listens on port 9
        connector.check()


def test_full_passes_start_every_interval_from_the_start_of_the_last_one(tmp_path: Path) -> None:
    """A pass that takes most of the interval must not push the next one a whole interval later:
    a revocation made just after a pass starts would otherwise wait for two passes and an interval."""
    from ragsync.sources import SourceRunner

    now = [100.0]
    source = SourceSettings(
        name="intranet",
        kind="dokuwiki",
        url="http://127.0.0.1:9",
        username="bot",
        password="x",  # type: ignore[arg-type]
        tenants=("acme",),
        interval_s=2.0,
    )
    runner = SourceRunner(source, tmp_path, clock=lambda: now[0])
    assert runner.due() == "full"
    now[0] += 1.5  # the pass takes 1.5 s
    runner.ran("full")
    now[0] = 101.9
    assert runner.due() is None
    now[0] = 102.0
    assert runner.due() == "full", "two seconds after the last pass started, not after it ended"

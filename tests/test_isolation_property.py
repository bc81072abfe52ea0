"""Isolation property (issue 8, "prove the class is closed"): no canary ever reaches a denied principal.

Hypothesis builds random drive worlds: two tenants, nested folders, manifests (valid, broken TOML,
unknown keys, `[files]` rules that match nothing), symlinks to files outside the root and inside it,
and documents each carrying a unique canary word. Each world is synced through the real connector
and pipeline on the embedded profile with the real embedding model, then asked, through the real
HTTP API with signed tokens, by many principals (either tenant, random groups) adversarial
questions: the canaries themselves, tenant names, FTS and Lucene syntax, each twice (the second
answer comes from the cache).

Invariant: a canary the manifests deny to a principal never appears in the answer, the claims, the
trace, anything the model was given, or any log line. The oracle is deliberately conservative:
it denies only what is certainly denied (another tenant, a broken or non-matching manifest on the
path, no entry of the principal in any read list on the path, a file outside the root); the system
may deny more (fail closed), never less.

Every world of a run is synced into one deployment (one home, one API), each under its own two
tenants, so an example costs a sync of a few documents and a few asks rather than a deployment, and
every ask also meets the canaries of all the worlds before it (other tenants: certainly denied).

CI: a rotating seed (the UTC date; `ISOLATION_SEED=<n>` replays a run, the seed is printed with the
figures and in a failure's report), WORLDS worlds x ASKS_PER_WORLD asks. The long run:
`HYPOTHESIS_PROFILE=long python3 -m pytest -p no:cacheprovider -o timeout=0 tests/test_isolation_property.py -s`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets as pysecrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import MODEL_PATH
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from query.tokens import issue_token
from ragsync.pipeline import sync_folder
from ragsync.server import server_app
from ragsync.settings import Settings
from ragsync.wiring import Components, build
from schemas.principal import Principal

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
WORLDS = {"ci": 200}.get(PROFILE, 400)
ASKS_PER_WORLD = int(os.environ.get("ISOLATION_ASKS", "4" if PROFILE == "ci" else "30"))
SEED = int(os.environ.get("ISOLATION_SEED") or datetime.now(UTC).strftime("%Y%m%d"))
"""Rotating: another set of worlds every day, the same all day (and with ISOLATION_SEED, any day)."""
settings.register_profile(
    PROFILE, max_examples=WORLDS, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)

TENANTS = ("acme", "globex")
GROUPS = ("staff", "hr", "board")
FOLDERS = ("", "a", "a/b")
COUNTS: dict[str, int] = {"worlds": 0, "documents": 0, "asks": 0, "denied_checks": 0, "leaks": 0}


@dataclass
class Doc:
    path: str  # relative to the drive root
    canary: str
    tenant: str
    denied_to_all: bool = False
    readers: set[str] = field(default_factory=set)  # union of every read entry on the path (generous)


@dataclass
class World:
    manifests: dict[str, str]  # relative path of the manifest -> text
    docs: list[Doc]
    outside: list[Doc]  # targets of symlinks that lie outside the root
    links: dict[str, str]  # link path -> target (absolute marker "OUT:<i>" or a relative path)
    tenants: tuple[str, ...] = TENANTS


def relabel(world: World, n: int) -> World:
    """The same world under tenants of its own (`acme7`, `globex7`), beside the other worlds of the run."""
    names = {t: f"{t}{n}" for t in TENANTS}

    def path(rel: str) -> str:
        head, _, rest = rel.partition("/")
        return f"{names[head]}/{rest}" if head in names else rel

    def text(manifest: str) -> str:
        for old, new in names.items():
            manifest = manifest.replace(f'tenant = "{old}"', f'tenant = "{new}"')
        return manifest

    docs = [Doc(path(d.path), d.canary, names[d.tenant], d.denied_to_all, set(d.readers)) for d in world.docs]
    outside = [Doc(d.path, d.canary, names[d.tenant], d.denied_to_all, set(d.readers)) for d in world.outside]
    return World(
        {path(rel): text(body) for rel, body in world.manifests.items()},
        docs,
        outside,
        {path(link): target for link, target in world.links.items()},
        tuple(names[t] for t in TENANTS),
    )


def canary() -> str:
    return "zq" + pysecrets.token_hex(5)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    manifests: dict[str, str] = {}
    docs: list[Doc] = []
    for tenant in TENANTS:
        for folder in FOLDERS:
            where = f"{tenant}/{folder}".rstrip("/")
            kind = draw(st.sampled_from(["none", "valid", "valid", "broken", "unknown_key", "bad_rule"]))
            read = draw(st.lists(st.sampled_from(GROUPS), max_size=2, unique=True))
            entries = ", ".join(f'"group:{g}"' for g in read)
            head = f'tenant = "{tenant}"\n' if folder == "" else ""
            if folder == "" and kind == "none":
                kind = "valid"  # every tenant folder names its tenant
            if kind == "valid":
                manifests[f"{where}/.ragsync-acl.toml"] = f"{head}read = [{entries}]\n"
            elif kind == "broken":
                manifests[f"{where}/.ragsync-acl.toml"] = f"{head}read = [{entries}\n"
            elif kind == "unknown_key":
                manifests[f"{where}/.ragsync-acl.toml"] = f"{head}reads = [{entries}]\n"
            elif kind == "bad_rule":
                manifests[f"{where}/.ragsync-acl.toml"] = (
                    f'{head}read = [{entries}]\n[files."Missing.md"]\nread = ["group:staff"]\n'
                )
            for i in range(draw(st.integers(1, 2))):
                docs.append(Doc(f"{where}/doc{i}.md", canary(), tenant))
    links: dict[str, str] = {}
    outside = [Doc(f"outside{i}.md", canary(), "acme", denied_to_all=True) for i in range(2)]
    for i, target in enumerate(outside):
        links[f"{draw(st.sampled_from(TENANTS))}/{draw(st.sampled_from(FOLDERS))}/link{i}.md".replace("//", "/")] = (
            f"OUT:{target.path}"
        )
    world = World(manifests, docs, outside, links)
    for doc in docs:
        _oracle(world, doc)
    return world


def _oracle(world: World, doc: Doc) -> None:
    parts = doc.path.split("/")[:-1]
    chain = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for folder in chain:
        text = world.manifests.get(f"{folder}/.ragsync-acl.toml")
        if text is None:
            continue
        if "reads =" in text or text.count("[") != text.count("]") or "Missing.md" in text:
            doc.denied_to_all = True  # broken, unknown key, or a rule matching nothing: locked
        for line in text.splitlines():
            if line.startswith("read"):
                doc.readers.update(g.strip(' "[]') for g in line.split("=", 1)[1].split(",") if g.strip(' "[]'))


def build_world(root: Path, world: World, outside_dir: Path) -> None:
    for rel, text in world.manifests.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for doc in world.docs:
        (root / doc.path).parent.mkdir(parents=True, exist_ok=True)
        (root / doc.path).write_text(f"# Note {doc.canary}\n\nThe code word is {doc.canary} for this note.\n")
    for doc in world.outside:
        (outside_dir / doc.path).write_text(f"# Secret {doc.canary}\n\nThe secret code is {doc.canary}.\n")
    for link, target in world.links.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(outside_dir / target.removeprefix("OUT:"))


def denied(doc: Doc, principal: Principal) -> bool:
    """Certainly denied: the system must never show this canary to the principal."""
    if doc.denied_to_all or doc.tenant != principal.tenant:
        return True
    return (
        not any(f"group:{g}" in doc.readers for g in principal.groups) and f"user:{principal.user}" not in doc.readers
    )


class RecordingModel:
    """The real model, with a record of every piece of evidence it was given (the prompt)."""

    def __init__(self, inner: Any, seen: list[str]) -> None:
        self.inner, self.seen, self.name = inner, seen, inner.name

    def decide(self, turn: Any) -> Any:
        self.seen.append(json.dumps([turn.question, [e.text for e in turn.evidence], list(turn.queries)]))
        return self.inner.decide(turn)


@st.composite
def asks(draw: st.DrawFn, world: World) -> tuple[Principal, str]:
    tenant = draw(st.sampled_from(world.tenants))
    groups = tuple(draw(st.lists(st.sampled_from(GROUPS), max_size=3, unique=True)))
    principal = Principal(tenant=tenant, user=draw(st.sampled_from(["ann", "bob"])), groups=groups)
    target = draw(st.sampled_from(world.docs + world.outside))
    question = draw(
        st.sampled_from(
            [
                f"What is the code word {target.canary}?",
                f"{target.canary}",
                f'"{target.canary}" OR *',
                f"tenant:{target.tenant} {target.canary}",
                f"{target.canary}* AND NOT x",
                f"secret code {target.canary} {' '.join(world.tenants)}",
                "What is the code word for this note?",
            ]
        )
    )
    return principal, question


@dataclass
class Deployment:
    """One home and one API for every world of the run."""

    tmp: Path
    components: Components
    client: TestClient
    secret: str
    seen: list[str]
    everything: list[Doc] = field(default_factory=list)  # every canary synced so far, all worlds


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.skip(f"no embedding model at {MODEL_PATH}")
    with tempfile.TemporaryDirectory() as tmp:
        secret = "isolation-" + "s" * 32
        components = build(Settings(home=Path(tmp) / "home", embed_model_path=MODEL_PATH, session_secret=secret))
        seen: list[str] = []
        real_model = Components.model
        components.model = lambda: RecordingModel(real_model(components), seen)  # type: ignore[method-assign]
        try:
            with TestClient(server_app(components)) as client:
                yield Deployment(Path(tmp), components, client, secret, seen)
        finally:
            components.close()


@seed(SEED)
@settings(settings.get_profile(PROFILE))
@given(drawn=worlds(), data=st.data())
def test_no_canary_reaches_a_principal_the_manifests_deny(
    deployment: Deployment, drawn: World, data: st.DataObject, caplog: pytest.LogCaptureFixture
) -> None:
    note(f"isolation seed {SEED}: ISOLATION_SEED={SEED} replays this run")
    d = deployment
    n = COUNTS["worlds"] = COUNTS["worlds"] + 1
    world = relabel(drawn, n)
    COUNTS["documents"] += len(world.docs) + len(world.outside)
    d.everything.extend(world.docs + world.outside)
    root, outside_dir = d.tmp / f"drive{n}", d.tmp / f"elsewhere{n}"
    root.mkdir()
    outside_dir.mkdir()
    build_world(root, world, outside_dir)
    typed: list[str] = []
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        sync_folder(d.components, root, tenants=world.tenants)
        for _ in range(ASKS_PER_WORLD):
            principal, question = data.draw(asks(world))
            typed.append(question)
            headers = {"Authorization": f"Bearer {issue_token(d.secret, principal)}"}
            d.seen.clear()
            for _attempt in range(2):  # the second answer may come from the cache
                response = d.client.post("/v1/ask", json={"question": question}, headers=headers)
                assert response.status_code == 200, response.text
                shown = response.text + "".join(d.seen)
                COUNTS["asks"] += 1
                for doc in d.everything:
                    if doc.canary in question or not denied(doc, principal):
                        continue  # a canary the asker typed, or one the oracle does not deny
                    COUNTS["denied_checks"] += 1
                    if doc.canary in shown:
                        COUNTS["leaks"] += 1
                    assert doc.canary not in shown, (doc, principal, question)
                # What the asker typed may echo; anything else it is denied must not.
                for doc in d.everything:
                    if denied(doc, principal) and doc.canary not in question:
                        assert doc.canary not in "".join(d.seen), (doc, principal, question)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    asked = "\n".join(typed)
    # A debug trace may echo what an asker typed, and the passage IDs (heading slugs) of what a reader
    # was given; never a canary that no asker of this world may read (other worlds' tenants included).
    for doc in d.everything:
        nobody = doc.denied_to_all or doc.tenant not in world.tenants or not doc.readers
        if nobody and doc.canary not in asked:
            lines = [line for line in logged.splitlines() if doc.canary in line]
            assert not lines, f"a canary in a log line: {doc}: {lines[:3]}"


def test_report_counts() -> None:
    """Printed with -s: cases tried (asks), denied canaries checked, leaks found."""
    print(f"isolation property (seed {SEED}): {COUNTS}")
    assert COUNTS["leaks"] == 0
    if COUNTS["worlds"]:
        assert COUNTS["denied_checks"] > COUNTS["asks"], "most asks meet canaries they may not see"

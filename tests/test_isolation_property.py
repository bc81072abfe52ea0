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

CI: a fixed seed, 4 worlds x 300 asks (>= 1,000 cases). The long run (>= 10,000):
`HYPOTHESIS_PROFILE=long python3 -m pytest -p no:cacheprovider -o timeout=0 tests/test_isolation_property.py -s`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets as pysecrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import MODEL_PATH
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from query.tokens import issue_token
from ragsync.pipeline import sync_folder
from ragsync.server import server_app
from ragsync.settings import Settings
from ragsync.wiring import Components, build
from schemas.principal import Principal

settings.register_profile(
    "ci", max_examples=4, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile("long", max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
ASKS_PER_WORLD = int(os.environ.get("ISOLATION_ASKS", "300"))

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
    tenant = draw(st.sampled_from(TENANTS))
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
                f"secret code {target.canary} {' '.join(TENANTS)}",
                "What is the code word for this note?",
            ]
        )
    )
    return principal, question


@pytest.fixture(scope="module")
def model_path() -> Path:
    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.skip(f"no embedding model at {MODEL_PATH}")
    return MODEL_PATH


@settings(settings.get_profile(PROFILE))
@given(world=worlds(), data=st.data())
def test_no_canary_reaches_a_principal_the_manifests_deny(
    model_path: Path, world: World, data: st.DataObject, caplog: pytest.LogCaptureFixture
) -> None:
    COUNTS["worlds"] += 1
    COUNTS["documents"] += len(world.docs) + len(world.outside)
    everything = world.docs + world.outside
    with tempfile.TemporaryDirectory() as tmp:
        root, outside_dir = Path(tmp) / "drive", Path(tmp) / "elsewhere"
        root.mkdir()
        outside_dir.mkdir()
        build_world(root, world, outside_dir)
        secret = "isolation-" + "s" * 32
        settings_ = Settings(home=Path(tmp) / "home", embed_model_path=model_path, session_secret=secret)
        components = build(settings_)
        seen: list[str] = []
        typed: list[str] = []
        real_model = Components.model
        components.model = lambda: RecordingModel(real_model(components), seen)  # type: ignore[method-assign]
        try:
            caplog.clear()
            with caplog.at_level(logging.DEBUG):
                sync_folder(components, root, tenants=TENANTS)
                client = TestClient(server_app(components))
                for _ in range(ASKS_PER_WORLD):
                    principal, question = data.draw(asks(world))
                    typed.append(question)
                    headers = {"Authorization": f"Bearer {issue_token(secret, principal)}"}
                    seen.clear()
                    for _attempt in range(2):  # the second answer may come from the cache
                        response = client.post("/v1/ask", json={"question": question}, headers=headers)
                        assert response.status_code == 200, response.text
                        shown = response.text + "".join(seen)
                        COUNTS["asks"] += 1
                        for doc in everything:
                            if doc.canary in question or not denied(doc, principal):
                                continue  # a canary the asker typed, or one the oracle does not deny
                            COUNTS["denied_checks"] += 1
                            if doc.canary in shown:
                                COUNTS["leaks"] += 1
                            assert doc.canary not in shown, (doc, principal, question)
                        # What the asker typed may echo; anything else it is denied must not.
                        for doc in everything:
                            if denied(doc, principal) and doc.canary not in question:
                                assert doc.canary not in "".join(seen), (doc, principal, question)
            logged = "\n".join(r.getMessage() for r in caplog.records)
            asked = "\n".join(typed)
            for doc in everything:  # a debug trace may echo what an asker typed, never a document's text
                if doc.canary not in asked:
                    assert doc.canary not in logged, f"a canary in a log line: {doc}"
        finally:
            components.close()


def test_report_counts() -> None:
    """Printed with -s: cases tried (asks), denied canaries checked, leaks found."""
    print(f"isolation property: {COUNTS}")
    assert COUNTS["leaks"] == 0

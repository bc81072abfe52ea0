"""Manifests narrow, never widen (issue 18 item 2): random trees of manifests against a reference model.

Hypothesis builds trees: nested folders (names in NFC and NFD forms), documents, and manifests
with or without a tenant, `read`, `[files]` keys (literal, in either Unicode form, globs, or
matching nothing) and `[folders]` keys, some broken; and the tenants the source declares.

The oracle (`may_read`) is the reference intersection, written without the implementation: a
principal may read a document only when every manifest above it is readable, every tenant named
on its path is one declared tenant, at least one manifest has a rule for it, and the principal
satisfies every such rule (each manifest's most specific one: its literal `[files]` key, else its
matching globs, all of them, else its deepest `[folders]` key, else its `read`).

Checked for every (document, principal), through `resolve_tree` and through the real drive and
git wiki connectors: the resolved ACL never admits a principal the oracle denies (never wider),
and the tenant is the declared one named on the path. `expected` then models the whole decision,
locks included, so the tests also fail if the implementation drifts from the documented rules,
e.g. by locking what it need not.

CI: derandomized, 1,000 trees for resolve_tree, 100 through the drive, 30 through a git
repository. Longer: `HYPOTHESIS_PROFILE=long python3 -m pytest -p no:cacheprovider tests/test_manifest_property.py -s`.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from itertools import chain, combinations
from pathlib import Path
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifest_trees import Tree, manifest_text

from connectors.access import Manifest, parse_manifest, resolve_tree

SCALE = {"ci": 1, "long": 10}[os.environ.get("HYPOTHESIS_PROFILE", "ci")]
QUICK = settings(
    max_examples=1000 * SCALE, derandomize=SCALE == 1, deadline=None, suppress_health_check=list(HealthCheck)
)
DRIVE = settings(QUICK, max_examples=100 * SCALE)
GIT = settings(QUICK, max_examples=30 * SCALE)
COUNTS = {"trees": 0, "documents": 0, "checks": 0, "locked": 0, "readable": 0}


def nfc(s: str) -> str:
    return unicodedata.normalize("NFC", s)


def nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


FOLDER_NAMES = ("a", "b", "é", nfd("é"))
DOC_NAMES = ("x.md", "y.md", "é.md", nfd("é.md"))
ENTRIES = ("group:g1", "group:g2", "group:g3", "user:u1", "user:u2")
TENANT_POOL = ("t1", "t2", "t3")
GROUPS = ("g1", "g2", "g3")
PRINCIPALS = [
    (user, frozenset(groups))
    for user in ("u1", "u2", "u3")
    for groups in chain.from_iterable(combinations(GROUPS, n) for n in range(len(GROUPS) + 1))
]
BROKEN = "read = [\n"
T = TypeVar("T")


@dataclass
class World:
    docs: list[str]  # raw paths
    manifests: dict[str, str]  # raw folder -> manifest text
    tenants: tuple[str, ...]


_N = st.integers(0, 1023)  # one strategy for every choice: building strategies per draw is what was slow


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """Trees biased toward the interesting case: mostly valid manifests that mostly narrow, so that
    many documents stay readable and their ACLs are compared, with every kind of mistake mixed in.
    Every choice shrinks toward 0: fewer folders, documents and rules, the first name of each list."""

    def num(k: int) -> int:
        return draw(_N) % k

    def pick(seq: Sequence[T]) -> T:
        return seq[num(len(seq))]

    def subset(pool: Sequence[str], most: int = 3) -> list[str]:
        return sorted({pick(pool) for _ in range(num(most + 1))})

    paths = ["/".join(pick(FOLDER_NAMES) for _ in range(1 + num(3))) for _ in range(num(6))]
    folders = {""} | {"/".join(p.split("/")[: i + 1]) for p in paths for i in range(p.count("/") + 1)}
    docs: list[str] = []
    for folder in sorted(folders):
        for name in subset(DOC_NAMES, 2):
            docs.append(f"{folder}/{name}" if folder else name)
    tenants = set(subset(TENANT_POOL)) | ({"t1"} if num(5) else set())
    manifests: dict[str, str] = {}
    grants: dict[str, list[str]] = {"": list(ENTRIES)}  # what each folder's nearest `read` grants, roughly

    def entries(within: list[str]) -> list[str]:
        return subset(within if within and num(5) else ENTRIES)  # mostly a narrowing

    for folder in sorted(folders):
        parent = folder.rpartition("/")[0] if folder else ""
        grants[folder] = grants[parent]
        if num(10) >= (8 if folder == "" else 4):
            continue
        if num(25) == 0:
            manifests[folder] = BROKEN
            continue
        below = [d[len(folder) + 1 :] if folder else d for d in docs if not folder or d.startswith(folder + "/")]
        subfolders = sorted({b.rsplit("/", 1)[0] for b in below if "/" in b})
        file_keys = [*below, *(nfd(b) for b in below), "*.md", "x*", "*/x.md"]
        file_keys += ["zz.md"] if num(10) == 0 else []  # matching nothing: locks
        folder_keys = [*subfolders, *(nfc(f) for f in subfolders)]
        folder_keys += ["zz"] if num(10) == 0 else []
        read = entries(grants[folder]) if num(3) else None
        files = {pick(file_keys): entries(grants[folder]) for _ in range(num(3))}
        tables = {pick(folder_keys): entries(grants[folder]) for _ in range(num(3))} if folder_keys else {}
        if len({nfc(k) for k in files}) < len(files) or len({nfc(k) for k in tables}) < len(tables):
            files, tables = {}, {}  # the same key in two forms: an error tests/test_manifest_narrowing.py covers
        if folder == "":
            tenant = "t1" if num(6) else pick([None, *TENANT_POOL])
        else:
            tenant = pick([None] * 6 + ["t1", *TENANT_POOL])
        if read is not None:
            grants[folder] = read
        manifests[folder] = manifest_text(tenant=tenant, read=read, files=files, folders=tables)
    return World(docs, manifests, tuple(sorted(tenants)))


# ------------------------------------------------------------------ the reference model

CONFLICT = "conflict"


def _glob(pattern: str, name: str) -> bool:
    p, n = pattern.split("/"), name.split("/")
    return len(p) == len(n) and all(fnmatchcase(a, b) for a, b in zip(n, p, strict=True))


def rule_of(manifest: Manifest, rel: str) -> frozenset[str] | str | None:
    """The manifest's most specific rule for a document (`rel` NFC, relative to its folder)."""
    files = {nfc(k): v.read for k, v in manifest.files.items()}
    if rel in files:
        return frozenset(files[rel])
    globs = {frozenset(v) for k, v in files.items() if any(c in k for c in "*?[") and _glob(k, rel)}
    if len(globs) > 1:
        return CONFLICT
    if globs:
        return globs.pop()
    folders = {nfc(k): v.read for k, v in manifest.folders.items()}
    parts = rel.split("/")[:-1]
    for depth in range(len(parts), 0, -1):
        if "/".join(parts[:depth]) in folders:
            return frozenset(folders["/".join(parts[:depth])])
    return None if manifest.read is None else frozenset(manifest.read)


_PARSED: dict[int, tuple[World, dict[str, Manifest], set[str]]] = {}


def parse(world: World) -> tuple[dict[str, Manifest], set[str]]:
    """The manifests that parse, and the folders of those that do not (once per world)."""
    cached = _PARSED.get(id(world))
    if cached is not None and cached[0] is world:
        return cached[1], cached[2]
    good, broken = {}, set()
    for folder, text in world.manifests.items():
        try:
            good[folder] = parse_manifest(text, folder)
        except ValueError:
            broken.add(folder)
    _PARSED.clear()
    _PARSED[id(world)] = (world, good, broken)
    return good, broken


def ancestors(doc: str) -> list[str]:
    parts = doc.split("/")[:-1]
    return ["", *("/".join(parts[: i + 1]) for i in range(len(parts)))]


def may_read(world: World, doc: str, user: str, groups: frozenset[str]) -> bool:
    """The reference intersection: what no correct resolution may exceed."""
    good, broken = parse(world)
    path = set(ancestors(nfc(doc)))
    if any(nfc(f) in path for f in broken):
        return False
    on_path = [(nfc(f), m) for f, m in good.items() if nfc(f) in path]
    tenants = {m.tenant for _, m in on_path if m.tenant}
    if len(tenants) != 1 or not tenants <= set(world.tenants):
        return False
    rules = [rule_of(m, nfc(doc)[len(f) + 1 :] if f else nfc(doc)) for f, m in on_path]
    rules = [r for r in rules if r is not None]
    principal = {f"user:{user}", *(f"group:{g}" for g in groups)}
    return bool(rules) and all(r != CONFLICT and principal & r for r in rules)


@dataclass(frozen=True)
class Expect:
    locked: bool
    tenant: str | None = None
    acl: tuple[str, ...] = ()


def expected(world: World) -> dict[str, Expect]:
    """The whole documented decision: which folders lock, and every other document's intersection."""
    good, broken = parse(world)
    folders_of = {nfc(f) for f in [*good, *broken]}
    every = {f for d in world.docs for f in ancestors(d)} | set(good) | broken
    clashes = {nfc(f) for f in every if sum(nfc(g) == nfc(f) for g in every) > 1} & folders_of
    bad = {nfc(f) for f in broken} | clashes
    by_nfc = {nfc(f): m for f, m in good.items()}
    docs = [nfc(d) for d in world.docs]
    for folder, manifest in by_nfc.items():
        above = [by_nfc[f] for f in ancestors(folder + "/x") if f in by_nfc and f != folder]
        first = next((m.tenant for m in above if m.tenant), None)
        if manifest.tenant and (manifest.tenant not in world.tenants or first not in (None, manifest.tenant)):
            bad.add(folder)
        rel = [d[len(folder) + 1 :] if folder else d for d in docs if not folder or d.startswith(folder + "/")]
        homes = [
            g[len(folder) + 1 :] if folder else g
            for g in folders_of
            if g != folder and (not folder or g.startswith(folder + "/"))
        ]
        for key in map(nfc, manifest.files):
            if key not in rel and not (any(c in key for c in "*?[") and any(_glob(key, r) for r in rel)):
                bad.add(folder)
        for key in map(nfc, manifest.folders):
            if not any(r.startswith(key + "/") for r in rel) and not any(
                h == key or h.startswith(key + "/") for h in homes
            ):
                bad.add(folder)
    alone: set[str] = set()
    result: dict[str, tuple[str | None, frozenset[str] | None]] = {}
    for doc in docs:
        tenant, readers = None, None
        for folder in ancestors(doc):
            manifest = by_nfc.get(folder)
            if manifest is None:
                continue
            if manifest.tenant and tenant and manifest.tenant != tenant:
                break  # a switch: that folder is bad already
            tenant = tenant or manifest.tenant
            rule = rule_of(manifest, doc[len(folder) + 1 :] if folder else doc)
            if rule == CONFLICT:
                alone.add(doc)
                break
            if rule is None:
                continue
            assert isinstance(rule, frozenset)
            if readers is not None and not rule <= readers:
                bad.add(folder)
                break
            readers = rule if readers is None else readers & rule
        result[doc] = (tenant, readers)
    out = {}
    for raw, doc in zip(world.docs, docs, strict=True):
        tenant, readers = result[doc]
        locked = doc in alone or tenant is None or any(f == "" or doc.startswith(f + "/") for f in bad)
        out[raw] = Expect(True) if locked else Expect(False, tenant, tuple(sorted(readers or ())))
    return out


# ------------------------------------------------------------------ the checks


def admits(acl: tuple[str, ...], user: str, groups: frozenset[str]) -> bool:
    return f"user:{user}" in acl or any(f"group:{g}" in acl for g in groups)


def check(world: World, resolved: dict[str, Expect]) -> None:
    COUNTS["trees"] += 1
    assert set(resolved) == set(world.docs)
    want = expected(world)
    for doc, got in resolved.items():
        COUNTS["documents"] += 1
        COUNTS["locked" if got.locked else "readable"] += 1
        if not got.locked:
            assert got.tenant in world.tenants, (doc, got)
            for user, groups in PRINCIPALS:
                COUNTS["checks"] += 1
                if admits(got.acl, user, groups):
                    assert may_read(world, doc, user, groups), ("wider than the reference", doc, got, user, groups)
        assert got == want[doc], (doc, got, want[doc], world)


def through_resolve_tree(world: World) -> dict[str, Expect]:
    good, broken = parse(world)
    access, _, _ = resolve_tree(good, dict.fromkeys(broken, "broken"), world.docs, {}, world.tenants)
    return {
        d: Expect(True) if a.locked or a.tenant is None else Expect(False, a.tenant, a.acl) for d, a in access.items()
    }


def through_connector(world: World, kind: str) -> dict[str, Expect]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Tree(kind, Path(tmp) / "tree")
        files: dict[str, str | None] = {d: "# doc\n" for d in world.docs}
        files |= {(f"{f}/" if f else "") + ".ragsync-acl.toml": text for f, text in world.manifests.items()}
        tree.write(files)  # type: ignore[arg-type]
        connector = tree.connector(world.tenants)

        async def listing() -> dict[str, Expect]:
            return {
                d.doc_id: Expect(True) if d.locked else Expect(False, d.tenant, d.acl)
                async for d in connector.documents()
            }

        return asyncio.run(listing())


@QUICK
@given(worlds())
def test_resolve_tree_is_never_wider_than_the_reference(world: World) -> None:
    check(world, through_resolve_tree(world))


@DRIVE
@given(worlds())
def test_the_drive_connector_is_never_wider_than_the_reference(world: World) -> None:
    check(world, through_connector(world, "drive"))


@GIT
@given(worlds())
def test_the_git_wiki_connector_is_never_wider_than_the_reference(world: World) -> None:
    check(world, through_connector(world, "git"))


def test_the_examples_exercised_both_outcomes() -> None:
    """Printed for the record (run with -s); runs last in this module."""
    print(f"manifest property: {COUNTS}")
    if COUNTS["trees"]:
        assert COUNTS["locked"] and COUNTS["readable"], COUNTS

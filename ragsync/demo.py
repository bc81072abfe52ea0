"""`ragsync demo`: the whole job on a sample drive, narrated, with its own expectations checked.

Two tenants, a versioned policy, a restricted document; then an answer with sources, a tenant
that sees its own facts, an abstention, an as-of question answered by the old version, a
revocation taking effect, a manifest that tries to widen its folder and is locked instead, and a
deletion with its audit record. Exit status 1 if any step
did not behave as narrated, so the demo doubles as a smoke test.
"""

from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

from query.as_of import parse_as_of
from query.worker import AskResult
from ragsync.commands.common import say
from ragsync.pipeline import sync_folder
from ragsync.settings import Settings
from ragsync.wiring import build, token_signer
from schemas.events import qualify_doc_id
from schemas.principal import Principal

REFUNDS_V1 = """\
---
effective_from: 2026-01-01
---
# Refund policy

Customers may request a refund within 30 days of purchase.
Refunds are paid to the original payment method.

## Exceptions

- Gift cards are not refundable.
- Custom orders can be refunded only when they arrive damaged.
"""

REFUNDS_V2 = REFUNDS_V1.replace("2026-01-01", "2026-09-01").replace("within 30 days", "within 45 days")

SALARIES = """\
# Salary bands

| Level | Band |
|-------|------|
| Engineer II | 70,000 to 85,000 EUR |
| Senior engineer | 90,000 to 110,000 EUR |

Salary bands are reviewed every April by the compensation committee.
"""

ONBOARDING = """\
<html><head><title>Onboarding</title></head><body>
<h1>Onboarding</h1>
<section><h2>First week</h2>
<p>New staff receive their laptop on the first morning from the IT desk.</p>
<ul><li>Badge photos are taken on Tuesday afternoons.</li>
<li>Security training must be finished within 5 days.</li></ul>
</section></body></html>
"""

GLOBEX_REFUNDS = """\
# Refund policy

Customers may request a refund within 14 days of delivery, with the receipt.
"""


SOURCE = "drive"
"""The sample drive's source name: its documents are known as drive:<path relative to the drive>."""
TENANTS = ("acme", "globex")
"""The tenants the sample drive is declared to hold (`ragsync sync --tenant`): no manifest may name another."""
ACME_MANIFEST = """\
tenant = "acme"
read = ["group:staff"]

# HR's folder needs readers acme's read does not grant: they are granted here, by the parent;
# acme/hr/.ragsync-acl.toml may only narrow them.
[folders."hr"]
read = ["group:hr", "group:hr-leads"]
"""
REFUNDS = qualify_doc_id(SOURCE, "acme/policies/refunds.md")
SALARIES_ID = qualify_doc_id(SOURCE, "acme/hr/salaries.md")


def build_drive(root: Path) -> None:
    files = {
        "acme/.ragsync-acl.toml": ACME_MANIFEST,
        "acme/policies/refunds.md": REFUNDS_V1,
        "acme/handbook/onboarding.html": ONBOARDING,
        "acme/hr/.ragsync-acl.toml": 'read = ["group:hr"]\n',
        "acme/hr/salaries.md": SALARIES,
        "globex/.ragsync-acl.toml": 'tenant = "globex"\nread = ["group:staff"]\n',
        "globex/refunds.md": GLOBEX_REFUNDS,
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


class Narrator:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.step = 0

    def title(self, text: str) -> None:
        self.step += 1
        say("")
        say(f"{self.step}. {text}", bold=True)

    def say(self, text: str) -> None:
        say(textwrap.indent(text, "   "))

    def expect(self, ok: bool, what: str) -> None:
        say(f"   {'✓' if ok else '✗'} {what}", fg="green" if ok else "red")
        if not ok:
            self.failures.append(what)

    def show(self, who: str, question: str, result: AskResult, as_of: str | None = None) -> None:
        when = f" (as of {as_of})" if as_of else ""
        self.say(f"{who} asks{when}: {question}")
        if result.answered:
            self.say(f"→ {result.answer}")
            for claim in result.claims:
                self.say(f"   source: {claim.passage_id}")
        else:
            self.say(f"→ {result.message}   [trace reason: {result.trace.reason}]")


def run_demo(directory: Path | None, base: Settings) -> int:
    workdir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="ragsync-demo-"))
    drive = workdir / "drive"
    settings = base.model_copy(update={"home": workdir / ".ragsync", "profile": "embedded"})
    n = Narrator()
    say(f"ragsync demo — sample drive and index under {workdir}", bold=True)

    n.title("Build a sample drive: tenants acme and globex, a versioned policy, a restricted HR folder")
    build_drive(drive)
    for path in sorted(p for p in drive.rglob("*") if p.is_file()):
        n.say(str(path.relative_to(drive)))

    def sync(label: str) -> None:
        components = build(settings)
        try:
            report = sync_folder(components, drive, SOURCE, tenants=TENANTS)
        finally:
            components.close()
        s = report.scan
        stats = report.stats
        for problem in s.errors:
            n.say(f"error: {problem}")
        n.say(
            f"{label}: {s.upserts} upserts, {s.acl_changes} ACL changes, {s.deletes} deletes, "
            f"{s.unchanged} unchanged; {stats.passages_written if stats else 0} passages written, "
            f"dense retrieval {'on' if components.embedder else 'off (BM25 only)'}"
        )

    signer = token_signer(settings)
    ann = signer.issue(Principal(tenant="acme", user="ann", groups=("staff",)))
    hal = signer.issue(Principal(tenant="acme", user="hal", groups=("staff", "hr")))
    gus = signer.issue(Principal(tenant="globex", user="gus", groups=("staff",)))

    def ask(token: str, question: str, as_of: str | None = None) -> AskResult:
        components = build(settings)
        try:
            return components.query_worker().ask_with_token(token, question, parse_as_of(as_of) if as_of else None)
        finally:
            components.close()

    n.title("Sync: connector → event log → chunk, embed → SQLite FTS5 + Qdrant (in-process)")
    sync("first sync")

    refund_q = "How many days do customers have to request a refund?"
    n.title("Ask as ann (acme, staff): an answer with verbatim quotes and sources")
    r = ask(ann, refund_q)
    n.show("ann", refund_q, r)
    n.expect(r.answered and "30 days" in (r.answer or ""), "answered from acme's policy: 30 days")
    n.expect(all(c.passage_id.startswith(f"{REFUNDS}@") for c in r.claims), "cites acme's document")

    n.title("Ask as gus (globex): same words, only globex's own document")
    r = ask(gus, refund_q)
    n.show("gus", refund_q, r)
    n.expect(r.answered and "14 days" in (r.answer or "") and "30" not in (r.answer or ""), "globex sees 14 days")

    salary_q = "What is the salary band for a senior engineer?"
    n.title("A restricted document: ann (staff) may not read HR's salary bands, hal (hr) may")
    r = ask(ann, salary_q)
    n.show("ann", salary_q, r)
    n.expect(not r.answered, "ann gets the generic abstention")
    r = ask(hal, salary_q)
    n.show("hal", salary_q, r)
    n.expect(r.answered and "90,000" in (r.answer or ""), "hal gets the band with its source")

    n.title("A new version of the refund policy (45 days, effective 2026-09-01)")
    (drive / "acme/policies/refunds.md").write_text(REFUNDS_V2)
    sync("re-sync")
    r = ask(ann, refund_q)
    n.show("ann", refund_q, r)
    n.expect(r.answered and "45 days" in (r.answer or ""), "the new version answers today")
    r = ask(ann, refund_q, as_of="2026-03-01")
    n.show("ann", refund_q, r, as_of="2026-03-01")
    n.expect(r.answered and "30 days" in (r.answer or ""), "as of March the old version answers")

    n.title("Revocation: HR narrows its folder to group:hr-leads")
    (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
    sync("re-sync")
    r = ask(hal, salary_q)
    n.show("hal", salary_q, r)
    n.expect(not r.answered, "hal no longer gets an answer")

    n.title("A manifest cannot widen: HR's folder tries to let all staff read, and is locked instead")
    (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:staff"]\n')
    components = build(settings)
    try:
        report = sync_folder(components, drive, SOURCE, tenants=TENANTS)
    finally:
        components.close()
    for problem in report.scan.errors:
        n.say(f"reported: {problem}")
    r = ask(ann, salary_q)
    n.show("ann", salary_q, r)
    n.expect(not r.answered and report.scan.locked == 1, "ann (staff) still gets nothing: the folder is locked")
    (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')

    n.title("Deletion: the salary document is removed at the source")
    (drive / "acme/hr/salaries.md").unlink()
    sync("re-sync")
    components = build(settings, with_embedder=False)
    try:
        records = components.audit.records("acme")
        remaining = components.lexical.count("acme", SALARIES_ID)
    finally:
        components.close()
    for rec in records:
        stores = ", ".join(f"{k} at {v.isoformat(timespec='milliseconds')}" for k, v in rec.removed_at.items())
        n.say(
            f"audit: {rec.tenant}/{rec.doc_id} v{rec.version} event {rec.event_id[:12]}… received "
            f"{rec.received_at.isoformat(timespec='milliseconds')}; removed from {stores}; cache invalidated "
            f"{rec.cache_invalidated_at.isoformat(timespec='milliseconds')}; {rec.passages_removed} passages"
        )
    n.expect(remaining == 0 and any(r.doc_id == SALARIES_ID for r in records), "gone and audited")

    say("")
    if n.failures:
        say(f"demo finished with {len(n.failures)} unexpected result(s): {n.failures}", fg="red")
        return 1
    say("demo finished: every step behaved as described", fg="green", bold=True)
    say(
        f'Try it yourself: RAGSYNC_HOME={settings.home} ragsync ask "..." --token $(RAGSYNC_HOME='
        f"{settings.home} ragsync token issue --tenant acme --user ann --groups staff)"
    )
    return 0

"""A private DokuWiki for tests and benchmarks: started, populated and edited through its own API.

`Wiki.start` runs `compose/local/services up dokuwiki` with a services home and a port of its own,
so each test gets an empty wiki (fresh users and ACL) and stops it after. Everything is done as
the wiki's admin through the remote API (XML-RPC): pages, users (`dokuwiki.createUser`,
`dokuwiki.deleteUsers`), ACL rules (`plugin.acl.addAcl`/`delAcl`).

The wiki's own decisions:
- `api_decisions`: `wiki.aclCheck(page, user)` through the API, one call per pair (~20 ms), in a few
  threads: the authority, used for full comparisons;
- `php_decisions`: the same function (`auth_aclcheck`, which `wiki.aclCheck` calls) run by PHP in
  one process on this wiki's conf and data, for every pair in a fraction of a second: used after
  each of many edits, and checked equal to `api_decisions` whenever both run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from connectors.dokuwiki import DokuWikiClient

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "compose" / "local" / "services"
ADMIN, PASSWORD = "ragsync-admin", "ragsync-admin-pw-test"
ORACLE_PHP = """<?php
define('DOKU_CONF', $argv[1]);
define('NOSESSION', 1);
require_once '/usr/share/dokuwiki/inc/init.php';
global $auth, $AUTH_ACL;
$auth = plugin_load('auth', 'authplain');
$AUTH_ACL = auth_loadACL();
$in = json_decode(file_get_contents('php://stdin'), true);
$out = [];
foreach ($in['users'] as $u) {
    $data = $auth->getUserData($u);
    $groups = $data ? $data['grps'] : [];
    foreach ($in['pages'] as $p) { $out[$p . ' ' . $u] = auth_aclcheck($p, $u, $groups); }
}
echo json_encode($out);
"""


def available() -> str | None:
    """Why no wiki can run here (None when it can)."""
    if not Path("/usr/share/dokuwiki/doku.php").is_file():
        return "Debian's dokuwiki package is not installed (apt-get install dokuwiki php-cli php-xml)"
    if subprocess.run(["php", "-r", "exit(extension_loaded('xml') ? 0 : 1);"], check=False).returncode != 0:
        return "php-cli with the xml extension is not installed"
    return None


@dataclass
class Wiki:
    home: Path
    port: int
    client: DokuWikiClient = field(init=False)
    _local: threading.local = field(default_factory=threading.local)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def conf(self) -> Path:
        return self.home / "run" / "dokuwiki" / "conf"

    def _env(self) -> dict[str, str]:
        return dict(
            os.environ,
            RAGSYNC_SERVICES_HOME=str(self.home),
            RAGSYNC_DOKUWIKI_PORT=str(self.port),
            RAGSYNC_DOKUWIKI_PASSWORD=PASSWORD,
        )

    def start(self) -> Wiki:
        done = subprocess.run([str(SERVICES), "up", "dokuwiki"], env=self._env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the wiki did not start: {done.stdout}{done.stderr}")
        self.client = DokuWikiClient(self.url, ADMIN, PASSWORD, timeout_s=30)
        return self

    def stop(self) -> None:
        subprocess.run([str(SERVICES), "down", "dokuwiki"], env=self._env(), capture_output=True, check=False)

    def own_client(self) -> DokuWikiClient:
        """One client (session) per thread: the transport is not thread-safe."""
        if not hasattr(self._local, "client"):
            self._local.client = DokuWikiClient(self.url, ADMIN, PASSWORD, timeout_s=30)
        return self._local.client  # type: ignore[no-any-return]

    # ---- edits, all through the API
    def put(self, page: str, text: str) -> None:
        assert self.client.call("wiki.putPage", page, text, {"sum": "test"}) is True

    def create_user(self, user: str, groups: Iterable[str]) -> None:
        record = {"user": user, "password": f"pw-{user}-0123", "name": user, "mail": f"{user}@example.invalid"}
        assert self.client.call("dokuwiki.createUser", {**record, "groups": sorted(groups)}) is True

    def set_groups(self, user: str, groups: Iterable[str]) -> None:
        """The 2022 API has no modifyUser: the user is deleted and created again with the new groups."""
        assert self.client.call("dokuwiki.deleteUsers", [user]) is True
        self.create_user(user, groups)

    def grant(self, scope: str, who: str, level: int) -> None:
        assert self.client.call("plugin.acl.addAcl", scope, who, level) is True

    def revoke(self, scope: str, who: str) -> None:
        assert self.client.call("plugin.acl.delAcl", scope, who) is True

    # ---- the wiki's own decisions
    def users(self) -> dict[str, frozenset[str]]:
        return self.client.users()

    def pages(self) -> list[str]:
        return [p.id for p in self.client.pages()]

    def api_decisions(self, pages: Sequence[str], users: Sequence[str]) -> dict[tuple[str, str], int]:
        pairs = [(p, u) for p in pages for u in users]
        with ThreadPoolExecutor(4) as pool:
            levels = list(pool.map(lambda pu: self.own_client().acl_check(pu[0], pu[1]), pairs))
        return dict(zip(pairs, levels, strict=True))

    def php_decisions(self, pages: Sequence[str], users: Sequence[str]) -> dict[tuple[str, str], int]:
        script = self.home / "oracle.php"
        if not script.exists():
            script.write_text(ORACLE_PHP)
        done = subprocess.run(
            ["php", "-d", "display_errors=stderr", str(script), f"{self.conf}/"],
            input=json.dumps({"pages": list(pages), "users": list(users)}),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        raw = json.loads(done.stdout)
        return {(p, u): int(raw[f"{p} {u}"]) for p in pages for u in users}


GROUPS = ("hr", "eng", "ops", "sales", "legal", "exec")
NAMESPACES = ("", "hr", "hr:pay", "eng", "eng:infra", "eng:infra:db", "ops", "sales", "sales:emea", "legal")
LEVELS = (0, 1, 1, 2, 8)


@dataclass
class Population:
    users: dict[str, frozenset[str]]
    pages: list[str]
    rules: list[tuple[str, str, int]]


def populate(wiki: Wiki, rng: random.Random, *, users: int, pages: int, rules: int) -> Population:
    """Users in overlapping groups, pages in nested namespaces, namespace and page rules (users,
    groups, @ALL, @user; inherited, overridden, level 0 to shut readers out)."""
    directory: dict[str, frozenset[str]] = {}
    for i in range(users):
        name = f"u{i:02d}"
        groups = frozenset(rng.sample(GROUPS, rng.randint(1, 3))) | {"user"}
        wiki.create_user(name, groups)
        directory[name] = groups
    ids: list[str] = []
    for i in range(pages):
        ns = NAMESPACES[i % len(NAMESPACES)]
        page = f"{ns}:p{i:03d}" if ns else f"p{i:03d}"
        wiki.put(page, f"====== Page {i} ======\n\nThe canary word of this page is kiwi{i:03d}x.\n")
        ids.append(page)
    wiki.revoke("*", "@user")  # the service's default: @user reads and writes everything
    made: list[tuple[str, str, int]] = [("*", "@ALL", 0), ("*", "@user", 1)]
    wiki.grant("*", "@user", 1)
    for _ in range(rules):
        made.append(random_rule(rng, ids, list(directory)))
        wiki.grant(*made[-1])
    return Population(directory, ids, made)


def random_rule(rng: random.Random, pages: Sequence[str], users: Sequence[str]) -> tuple[str, str, int]:
    if rng.random() < 0.3:
        scope = rng.choice(pages)
    else:
        ns = rng.choice(NAMESPACES)
        scope = f"{ns}:*" if ns else "*"
    roll = rng.random()
    who = (
        rng.choice(users)
        if roll < 0.35
        else "@ALL"
        if roll < 0.45
        else "@user"
        if roll < 0.5
        else "@" + rng.choice(GROUPS)
    )
    return scope, who, rng.choice(LEVELS)


def random_edit(wiki: Wiki, rng: random.Random, population: Population, serial: int) -> str:
    """One edit made in the wiki itself: a grant, a revocation, a membership change or a page move."""
    roll = rng.random()
    users = sorted(population.users)
    if roll < 0.35:
        rule = random_rule(rng, population.pages, users)
        wiki.grant(*rule)
        population.rules.append(rule)
        return f"grant {rule}"
    if roll < 0.6 and len(population.rules) > 2:
        scope, who, _ = population.rules.pop(rng.randrange(2, len(population.rules)))
        wiki.revoke(scope, who)
        return f"revoke {scope} {who}"
    if roll < 0.8:
        user = rng.choice(users)
        groups = frozenset(rng.sample(GROUPS, rng.randint(0, 3))) | {"user"}
        wiki.set_groups(user, groups)
        population.users[user] = groups
        return f"groups of {user} = {sorted(groups)}"
    old = rng.choice(population.pages)
    ns = rng.choice(NAMESPACES)
    new = f"{ns}:m{serial:03d}" if ns else f"m{serial:03d}"
    text = str(wiki.client.call("wiki.getPage", old))
    wiki.put(new, text)
    wiki.put(old, "")  # an empty page is DokuWiki's deletion
    population.pages[population.pages.index(old)] = new
    return f"move {old} -> {new}"

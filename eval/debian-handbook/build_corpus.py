#!/usr/bin/env python3
"""Build the evaluation corpus from the Debian Administrator's Handbook (Debian package debian-handbook, pinned below).

Publican 4.3 over DocBook: one section per page, each opening with a banner, a "docnav" list (Prev, Up,
Home, Next) above and below the text, hundreds of empty index-term anchors inside paragraphs, and sidebars
("BACK TO BASICS", "CAUTION") set in the running text. A fourth generator besides Sphinx (Python),
AsciiDoc (Git) and Texinfo (flex). The English pages only (html/en-US). The corpus is a drive folder for
`ragsync sync`, under two tenants with the committed ACL manifests (manifests/) laid over it:

    hbadmin/    tenant hbadmin, read: group:sysadmins
      packages/   APT, dpkg, upgrades
      system/     configuration, Unix services, storage, virtualization, backup
      network/    network infrastructure and services; sect.virtual-private-network.html: user:ana, group:secteam
      security/   read: group:secteam only (firewall, supervision, AppArmor, compromised machines)
    hbdesk/     tenant hbdesk, read: group:helpdesk (the workstation chapter and troubleshooting)

Two sizes: full (56 pages) and ci (17 pages). Copies keep the package's mtimes, so a re-sync re-indexes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from corpuskit import DebianDoc, build, build_main, ensure_package  # noqa: E402

DOC = DebianDoc("debian-handbook", "11.20220922", Path("/usr/share/doc/debian-handbook/html/en-US"))
TENANTS = ("hbadmin", "hbdesk")
"""The tenants the corpus is synced with (`ragsync sync --tenant`, as in run.sh): its manifests name only these."""

_PACKAGES_FULL = [
    "apt", "sect.apt-get", "sect.apt-cache", "sect.apt-file", "sect.package-authentication",
    "sect.regular-upgrades", "sect.automatic-upgrades", "sect.dist-upgrade", "sect.searching-packages",
    "sect.manipulating-packages-with-dpkg", "sect.package-meta-information",
]  # fmt: skip
_PACKAGES_CI = ["apt", "sect.apt-get", "sect.automatic-upgrades", "sect.manipulating-packages-with-dpkg"]
_SYSTEM_FULL = [
    "basic-configuration", "sect.user-group-databases", "sect.creating-accounts", "sect.shell-environment",
    "sect.config-bootloader", "sect.config-misc", "sect.kernel-installation", "unix-services", "sect.remote-login",
    "sect.rights-management", "sect.administration-interfaces", "sect.syslog", "sect.inetd",
    "sect.task-scheduling-cron-atd", "sect.asynchronous-task-scheduling-anacron", "sect.quotas", "sect.backup",
    "sect.hotplug", "sect.power-management", "advanced-administration", "sect.virtualization",
    "sect.automated-installation", "sect.monitoring",
]  # fmt: skip
_SYSTEM_CI = ["sect.config-misc", "unix-services", "sect.task-scheduling-cron-atd", "sect.backup", "sect.syslog"]
_NETWORK_FULL = [
    "sect.network-config", "sect.hostname-name-service", "network-infrastructure", "sect.virtual-private-network",
    "sect.dhcp", "sect.domain-name-servers", "network-services", "sect.http-web-server", "sect.nfs-file-server",
    "sect.windows-file-server-with-samba",
]  # fmt: skip
_NETWORK_CI = ["sect.network-config", "sect.virtual-private-network", "sect.http-web-server"]
_SECURITY_FULL = [
    "security", "sect.firewall-packet-filtering", "sect.supervision", "sect.apparmor",
    "sect.other-security-considerations", "sect.dealing-with-compromised-machine",
]  # fmt: skip
_SECURITY_CI = ["security", "sect.supervision"]
_DESK_FULL = [
    "workstation", "sect.graphical-desktops", "sect.web-browsers", "sect.config-printing", "solving-problems",
    "sect.common-procedures",
]  # fmt: skip
_DESK_CI = ["workstation", "sect.config-printing", "solving-problems"]


def _pages(
    packages: list[str], system: list[str], network: list[str], security: list[str], desk: list[str]
) -> list[tuple[str, str]]:
    return [
        *((f"{p}.html", f"hbadmin/packages/{p}.html") for p in packages),
        *((f"{p}.html", f"hbadmin/system/{p}.html") for p in system),
        *((f"{p}.html", f"hbadmin/network/{p}.html") for p in network),
        *((f"{p}.html", f"hbadmin/security/{p}.html") for p in security),
        *((f"{p}.html", f"hbdesk/desktop/{p}.html") for p in desk),
    ]


# (page in the package, path in the corpus); the corpus path is the doc_id the questions name.
SUBSETS: dict[str, list[tuple[str, str]]] = {
    "full": _pages(_PACKAGES_FULL, _SYSTEM_FULL, _NETWORK_FULL, _SECURITY_FULL, _DESK_FULL),
    "ci": _pages(_PACKAGES_CI, _SYSTEM_CI, _NETWORK_CI, _SECURITY_CI, _DESK_CI),
}

__all__ = ["DOC", "SUBSETS", "build", "ensure_package"]

if __name__ == "__main__":
    build_main(DOC, SUBSETS, HERE, __doc__ or "")

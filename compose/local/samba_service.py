"""Debian's smbd on 127.0.0.1, privately configured, for the SMB source (issue 19): `services up samba`.

Only smbd runs (no nmbd, no winbind): users are local Unix users with a tdbsam password entry, groups
are Unix groups mapped to domain groups (`net groupmap`), so the server's SAMR lists them and its LSA
names them, as a Windows file server in a domain would. Everything lives under the services home: its
own smb.conf, private, lock, state and cache folders, and the share's folder; nothing under /etc/samba
is read or written. The share stores NT ACLs in extended attributes (vfs acl_xattr) and evaluates them
itself (`acl_xattr:ignore system acls = yes`, so the POSIX bits below do not add a second, lossy check).

Environment:
  RAGSYNC_SMB_PORT       port (default 4455)
  RAGSYNC_SMB_SHARE      the share's name (default docs)
  RAGSYNC_SMB_USER       the account the connector reads with (default ragsync-reader)
  RAGSYNC_SMB_PASSWORD   its password (default ragsync-reader-pw: a test server on 127.0.0.1 only)
  RAGSYNC_SMB_ADMIN, RAGSYNC_SMB_ADMIN_PASSWORD
                         the share's administrator (default ragsync-admin / ragsync-admin-pw): who sets ACLs
                         with smbcacls in the tests and benchmarks; the connector never uses it
  RAGSYNC_SMB_SHARE_PATH the share's folder (default /var/tmp/ragsync-samba/share: every user must be able
                         to enter it, which a services home under /root is not)

Standard library only, like the services script that loads it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

SMB_PORT = int(os.environ.get("RAGSYNC_SMB_PORT") or 4455)
SMB_SHARE = os.environ.get("RAGSYNC_SMB_SHARE") or "docs"
SMB_USER = os.environ.get("RAGSYNC_SMB_USER") or "ragsync-reader"
SMB_PASSWORD = os.environ.get("RAGSYNC_SMB_PASSWORD") or "ragsync-reader-pw"
TOOLS_PORT = 445
"""Also listened on: samba 4.17's smbcacls has no port option (it dials 445, then 139), and the tests and
benchmarks edit ACLs with it, as an administrator would."""
SHARE_PATH = Path(os.environ.get("RAGSYNC_SMB_SHARE_PATH") or "/var/tmp/ragsync-samba/share")
SMB_ADMIN = os.environ.get("RAGSYNC_SMB_ADMIN") or "ragsync-admin"
SMB_ADMIN_PASSWORD = os.environ.get("RAGSYNC_SMB_ADMIN_PASSWORD") or "ragsync-admin-pw"
WORKGROUP = "RAGSYNC"


def smb_conf(root: Path, share_path: Path, port: int = SMB_PORT, share: str = SMB_SHARE) -> str:
    return f"""[global]
    workgroup = {WORKGROUP}
    netbios name = RAGSYNCSMB
    server role = standalone server
    interfaces = 127.0.0.1
    bind interfaces only = yes
    smb ports = {port} {TOOLS_PORT}
    disable netbios = yes
    server min protocol = SMB2_10
    passdb backend = tdbsam:{root}/private/passdb.tdb
    private dir = {root}/private
    lock directory = {root}/lock
    state directory = {root}/state
    cache directory = {root}/cache
    pid directory = {root}/run
    ncalrpc dir = {root}/run/ncalrpc
    log file = {root}/log/smbd.log
    log level = 1
    max log size = 10000
    load printers = no
    printing = bsd
    printcap name = /dev/null
    disable spoolss = yes
    map to guest = Never
    restrict anonymous = 2
    usershare path =
    rpc_server:lsarpc = embedded
    rpc_server:samr = embedded
    rpc_server:srvsvc = embedded

[{share}]
    path = {share_path}
    read only = no
    browseable = yes
    admin users = {SMB_ADMIN}
    vfs objects = acl_xattr
    nt acl support = yes
    acl_xattr:ignore system acls = yes
    store dos attributes = yes
    map acl inherit = yes
    inherit acls = yes
    create mask = 0666
    directory mask = 0777
    force create mode = 0666
    force directory mode = 0777
"""


def ensure_unix_user(name: str) -> None:
    if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)


def set_smb_password(conf: Path, name: str, password: str) -> None:
    subprocess.run(
        ["smbpasswd", "-c", str(conf), "-s", "-a", name],
        input=f"{password}\n{password}\n",
        text=True,
        capture_output=True,
        check=True,
    )


class Samba:
    name = "samba"
    port = SMB_PORT
    marker = "smbd"

    def __init__(self, run_dir: Path, helpers: dict[str, Callable[..., object]]) -> None:
        self.dir = run_dir / "samba"
        self.conf = self.dir / "smb.conf"
        self.share = SHARE_PATH  # outside the services home, which may sit in a home only root may enter
        self.pidfile = self.dir / "smbd.pgid"
        self.logfile = self.dir / "log" / "smbd.stdout"
        self.h = helpers

    def pid(self) -> int | None:
        pid = self.h["read_int"](self.pidfile)
        return pid if pid and self.h["pid_alive"](pid) and self.marker in self.h["cmdline"](pid) else None  # type: ignore[return-value]

    def members(self) -> list[int]:
        pid = self.pid()
        return self.h["group_members"](pid) if pid else []  # type: ignore[return-value]

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        out = subprocess.run(
            [
                "smbclient",
                "-s",
                str(self.conf),
                "-p",
                str(self.port),
                f"//127.0.0.1/{SMB_SHARE}",
                "-U",
                f"{SMB_USER}%{SMB_PASSWORD}",
                "-c",
                "ls",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.returncode == 0

    def start(self) -> None:
        self.h["ensure_apt_package"]("smbd", "samba")
        self.h["ensure_apt_package"]("smbclient", "smbclient")
        if not list(Path("/usr/lib").glob("*/samba/vfs/acl_xattr.so")):  # the NT ACL store: samba-vfs-modules
            self.h["log"]("installing samba-vfs-modules with apt-get")
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            subprocess.run(
                ["apt-get", "install", "-y", "--no-install-recommends", "samba-vfs-modules"],
                env=env,
                capture_output=True,
                check=True,
            )
        keep = bool(self.h["keep"]())
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        if not keep:
            shutil.rmtree(self.share, ignore_errors=True)
        for sub in ("private", "lock", "state", "cache", "run/ncalrpc", "log"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.share.mkdir(parents=True, exist_ok=True)
        (self.dir / "private").chmod(0o700)
        self.share.chmod(0o777)
        self.conf.write_text(smb_conf(self.dir, self.share))
        ensure_unix_user(SMB_USER)
        set_smb_password(self.conf, SMB_USER, SMB_PASSWORD)
        ensure_unix_user(SMB_ADMIN)
        set_smb_password(self.conf, SMB_ADMIN, SMB_ADMIN_PASSWORD)
        cmd = ["smbd", "--foreground", "--no-process-group", "--debug-stdout", "-s", str(self.conf)]
        proc = self.h["spawn"](cmd, self.logfile, cwd=self.dir)
        self.pidfile.write_text(f"{proc.pid}\n")  # type: ignore[attr-defined]
        try:
            self.h["wait_ready"](self.name, self.ready, proc.pid, self.logfile, proc=proc)  # type: ignore[attr-defined]
        except Exception:
            self.h["stop_group"](self.name, proc.pid, self.marker, grace=10)  # type: ignore[attr-defined]
            raise
        self.h["log"](f"samba: share //127.0.0.1:{self.port}/{SMB_SHARE} at {self.share}, config {self.conf}")

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            self.h["stop_group"](self.name, pid, self.marker, grace=20)
            deadline = time.monotonic() + 5
            while self.pid() is not None and time.monotonic() < deadline:
                time.sleep(0.1)

    def describe(self) -> str:
        # Called before start(), which installs samba: on a fresh machine smbd is not there yet.
        if shutil.which("smbd") is None:
            return "smbd (Debian's samba, installed on start)"
        out = subprocess.run(["smbd", "--version"], capture_output=True, text=True)
        return f"smbd {out.stdout.strip().removeprefix('Version ')}" if out.returncode == 0 else "smbd"

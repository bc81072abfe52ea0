"""Every file's security descriptor in few round trips and little CPU, on impacket's logged-in session.

Why this exists: an ACL edit changes neither a file's size nor its write time, so every pass of an SMB
source must read every file's descriptor (connectors.smb), and one at a time through impacket that is
three round trips per file and, worse, about 6 ms of Python per file packing and parsing impacket's
generic structures: on a loaded two-core machine most of a pass. Here the three requests of a file
(CREATE for READ_CONTROL, QUERY_INFO of OWNER|GROUP|DACL, CLOSE) are packed with `struct` and sent
pipelined, a batch at a time: the creates of a batch go out together, then their queries, then
their closes, so a batch costs three round trips.

The session stays impacket's: its message ids (the connection's sequence window), session and tree
ids, signing and encryption keys, and impacket's rules for them: a request is signed (HMAC-SHA256 for
SMB 2.x, AES-CMAC for 3.x) when the session signs and its tree does not encrypt, and encrypted
(AES-128-CCM in an SMB2 TRANSFORM header) when the session or its tree encrypts (Samba encrypts
SMB 3.1.1 sessions). Unlike impacket, a reply's CCM tag is checked: a reply that fails it raises.
SMB1 is left to impacket (`usable` says no).

Fail closed: a file's own error status (access denied, gone since the listing) is that file's answer,
a string, so the caller makes it readable by nobody; a broken connection or a malformed reply raises,
and the caller fails the pass rather than guess.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Sequence
from typing import Any

HEADER = struct.Struct("<4sHHIHHIIQIIQ16s")
CREATE = struct.Struct("<HBBIQQIIIIIHHII")
QUERY = struct.Struct("<HBBIHHIII16s")
CLOSE = struct.Struct("<HHI16s")
TRANSFORM = struct.Struct("<4s16s16sIHHQ")
SMB2_CREATE, SMB2_CLOSE, SMB2_QUERY_INFO = 0x05, 0x06, 0x10
FLAGS_SERVER_TO_REDIR, FLAGS_ASYNC, FLAGS_SIGNED = 0x1, 0x2, 0x8
STATUS_SUCCESS, STATUS_PENDING = 0, 0x103
INFO_SECURITY = 3
IMPERSONATION = 2
FILE_OPEN = 1
CREDITS_ASKED = 127


class WireError(Exception):
    """The connection or a reply is broken: not a file's failure."""


def usable(smb: Any, tid: int) -> bool:
    """impacket's SMB2/3 session on a connected tree: the case this module speaks for."""
    from impacket.smb3 import SMB3

    return isinstance(smb, SMB3) and smb._Session["TreeConnectTable"].get(tid) is not None


class Pipeline:
    """Requests on impacket's SMB3 session: `send` returns the message id, `receive` its reply."""

    def __init__(self, smb: Any, tid: int, timeout_s: float) -> None:
        from impacket.smb3structs import SMB2_DIALECT_002, SMB2_DIALECT_21, SMB2_SESSION_FLAG_ENCRYPT_DATA

        self.smb = smb
        self.tid = tid
        self.timeout_s = timeout_s
        session = smb._Session
        tree_encrypts = bool(session["TreeConnectTable"][tid]["EncryptData"])
        self.session_id = int(session["SessionID"])
        self.encrypt = tree_encrypts or bool(session["SessionFlags"] & SMB2_SESSION_FLAG_ENCRYPT_DATA)
        self.sign = bool(session["SigningActivated"]) and len(session["SessionKey"]) > 0 and not tree_encrypts
        self.encryption_key = bytes(session["EncryptionKey"] or b"") if self.encrypt else b""
        self.decryption_key = bytes(session["DecryptionKey"] or b"") if self.encrypt else b""
        self.hmac = smb._Connection["Dialect"] in (SMB2_DIALECT_21, SMB2_DIALECT_002)
        self.key = bytes(session["SessionKey"] if self.hmac else session["SigningKey"])
        self.replies: dict[int, tuple[int, bytes]] = {}

    def send(self, command: int, body: bytes) -> int:
        connection = self.smb._Connection
        mid = int(connection["SequenceWindow"])
        connection["SequenceWindow"] = mid + 1
        flags = FLAGS_SIGNED if self.sign else 0
        header = HEADER.pack(
            b"\xfeSMB", 64, 1, 0, command, CREDITS_ASKED, flags, 0, mid, 0, self.tid, self.session_id, bytes(16)
        )
        packet = header + body
        if self.sign:
            packet = packet[:48] + self._signature(packet) + packet[64:]
        if self.encrypt:
            packet = self._encrypted(packet)
        self.smb._NetBIOSSession.send_packet(packet)
        return mid

    def _encrypted(self, plain: bytes) -> bytes:
        from Cryptodome.Cipher import AES

        nonce = os.urandom(11)
        header = TRANSFORM.pack(b"\xfdSMB", bytes(16), nonce + bytes(5), len(plain), 0, 1, self.session_id)
        cipher = AES.new(self.encryption_key, AES.MODE_CCM, nonce)
        cipher.update(header[20:])
        sealed = cipher.encrypt(plain)
        return header[:4] + cipher.digest() + header[20:] + sealed

    def _decrypted(self, data: bytes) -> bytes:
        from Cryptodome.Cipher import AES

        if not self.decryption_key or len(data) < TRANSFORM.size:
            raise WireError("an encrypted reply on a session without keys, or a short one")
        cipher = AES.new(self.decryption_key, AES.MODE_CCM, data[20:31])
        cipher.update(data[20 : TRANSFORM.size])
        try:
            return bytes(cipher.decrypt_and_verify(data[TRANSFORM.size :], data[4:20]))
        except ValueError:
            raise WireError("an encrypted reply whose tag does not verify") from None

    def _signature(self, packet: bytes) -> bytes:
        if self.hmac:
            return hmac.new(self.key, packet, hashlib.sha256).digest()[:16]
        from Cryptodome.Cipher import AES
        from Cryptodome.Hash import CMAC

        return bytes(CMAC.new(self.key, packet, ciphermod=AES).digest())

    def receive(self, mid: int) -> tuple[int, bytes]:
        """(status, the whole reply) of request `mid`; interim STATUS_PENDING replies are waited out."""
        while mid not in self.replies:
            try:
                data = bytes(self.smb._NetBIOSSession.recv_packet(self.timeout_s).get_trailer())
            except Exception as exc:
                raise WireError(f"no reply from the server: {type(exc).__name__}: {exc}") from None
            if data[:4] == b"\xfdSMB":
                data = self._decrypted(data)
            if len(data) < HEADER.size or data[:4] != b"\xfeSMB":
                raise WireError("a reply that is not SMB2 (an SMB1 reply, or a compound)")
            _, _, _, status, _, _, flags, _, got, _, _, _, _ = HEADER.unpack_from(data)
            if status == STATUS_PENDING and flags & FLAGS_ASYNC:
                continue  # the final reply to that id follows
            self.replies[int(got)] = (int(status), data)
        return self.replies.pop(mid)


def _name(path: str) -> bytes:
    return path.replace("/", "\\").lstrip("\\").encode("utf-16le")


def descriptors(
    smb: Any,
    tid: int,
    paths: Sequence[str],
    *,
    access: int,
    share: int,
    options: int,
    info: int,
    batch: int,
    timeout_s: float,
) -> list[bytes | str]:
    """Each path's raw self-relative security descriptor, or its error status as text."""
    wire = Pipeline(smb, tid, timeout_s)
    found: list[bytes | str] = []
    for start in range(0, len(paths), batch):
        found.extend(_batch(wire, paths[start : start + batch], access, share, options, info))
    return found


def _batch(wire: Pipeline, paths: Sequence[str], access: int, share: int, options: int, info: int) -> list[bytes | str]:
    creates = []
    for path in paths:
        name = _name(path)
        body = CREATE.pack(57, 0, 0, IMPERSONATION, 0, 0, access, 0, share, FILE_OPEN, options, 120, len(name), 0, 0)
        creates.append(wire.send(SMB2_CREATE, body + (name or b"\x00")))
    found: list[bytes | str] = ["" for _ in paths]
    opened: dict[int, bytes] = {}
    for i, mid in enumerate(creates):
        status, reply = wire.receive(mid)
        if status != STATUS_SUCCESS:
            found[i] = status_text(status)
        elif len(reply) < 64 + 80:
            raise WireError("a CREATE reply too short for its file id")
        else:
            opened[i] = reply[64 + 64 : 64 + 80]
    queries = {
        i: wire.send(SMB2_QUERY_INFO, QUERY.pack(41, INFO_SECURITY, 0, 65535, 0, 0, 0, info, 0, fid) + b"\x00")
        for i, fid in opened.items()
    }
    for i, mid in queries.items():
        status, reply = wire.receive(mid)
        if status != STATUS_SUCCESS:
            found[i] = status_text(status)
            continue
        if len(reply) < 64 + 8:
            raise WireError("a QUERY_INFO reply too short")
        offset, length = struct.unpack_from("<HI", reply, 64 + 2)
        if offset + length > len(reply):
            raise WireError("a QUERY_INFO reply shorter than the descriptor it announces")
        found[i] = reply[offset : offset + length]
    closes = [wire.send(SMB2_CLOSE, CLOSE.pack(24, 0, 0, fid)) for fid in opened.values()]
    for mid in closes:
        wire.receive(mid)  # a failed close changes no answer; the handle goes with the session
    return found


def status_text(code: int) -> str:
    from impacket.nt_errors import ERROR_MESSAGES

    name = ERROR_MESSAGES.get(code, ("",))[0]
    return f"{name or 'NT status'} ({code:#010x})"

"""connectors/smb_wire.py packs what impacket would send, and refuses what it must not trust.

The pipelined descriptor reads (every SMB pass, every file) bypass impacket's packet structures for
speed; these checks pin the bytes to impacket's own packing of the same requests, so the fast path
cannot drift from the protocol impacket speaks, and check that a tampered encrypted reply raises
(impacket itself does not check the tag). The server round trip is tests/test_smb_source.py's.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from impacket import smb3structs as s

from connectors import smb_wire

NAMES = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\\/\x00"), max_size=40)


def _impacket_create(name: bytes, access: int, share: int, options: int) -> bytes:
    create = s.SMB2Create()
    create["SecurityFlags"] = 0
    create["RequestedOplockLevel"] = s.SMB2_OPLOCK_LEVEL_NONE
    create["ImpersonationLevel"] = s.SMB2_IL_IMPERSONATION
    create["DesiredAccess"] = access
    create["FileAttributes"] = 0
    create["ShareAccess"] = share
    create["CreateDisposition"] = s.FILE_OPEN
    create["CreateOptions"] = options
    create["NameLength"] = len(name)
    create["Buffer"] = name or b"\x00"
    create["CreateContextsOffset"] = 0
    create["CreateContextsLength"] = 0
    packet = s.SMB2Packet()
    packet["Data"] = create
    return bytes(packet.getData()[64:])


@settings(max_examples=200, deadline=None)
@given(folders=st.lists(NAMES.filter(bool), max_size=3), leaf=NAMES, access=st.integers(0, 2**32 - 1))
def test_a_create_is_packed_as_impacket_packs_it(folders: list[str], leaf: str, access: int) -> None:
    path = "/".join([*folders, leaf])
    name = smb_wire._name(path)
    ours = smb_wire.CREATE.pack(
        57, 0, 0, smb_wire.IMPERSONATION, 0, 0, access, 0, 7, smb_wire.FILE_OPEN, 0x40, 120, len(name), 0, 0
    )
    assert ours + (name or b"\x00") == _impacket_create(name, access, 7, 0x40)


def test_a_query_and_a_close_are_packed_as_impacket_packs_them() -> None:
    fid = os.urandom(16)
    query = s.SMB2QueryInfo()
    query["FileID"] = fid
    query["InfoType"] = s.SMB2_0_INFO_SECURITY
    query["FileInfoClass"] = 0
    query["OutputBufferLength"] = 65535
    query["AdditionalInformation"] = 7
    query["InputBufferOffset"] = 0
    query["Buffer"] = b"\x00"
    query["Flags"] = 0
    packet = s.SMB2Packet()
    packet["Data"] = query
    ours = smb_wire.QUERY.pack(41, smb_wire.INFO_SECURITY, 0, 65535, 0, 0, 0, 7, 0, fid) + b"\x00"
    assert ours == bytes(packet.getData()[64:])
    close = s.SMB2Close()
    close["Flags"] = 0
    close["FileID"] = fid
    packet = s.SMB2Packet()
    packet["Data"] = close
    assert smb_wire.CLOSE.pack(24, 0, 0, fid) == bytes(packet.getData()[64:])


def _pipeline(key: bytes) -> smb_wire.Pipeline:
    wire = object.__new__(smb_wire.Pipeline)
    wire.session_id = 0x1234
    wire.encryption_key = key
    wire.decryption_key = key
    return wire


def test_an_encrypted_request_opens_with_its_key_and_a_tampered_reply_raises() -> None:
    wire = _pipeline(os.urandom(16))
    plain = b"\xfeSMB" + os.urandom(100)
    sealed = wire._encrypted(plain)
    assert sealed[:4] == b"\xfdSMB" and plain not in sealed
    assert wire._decrypted(sealed) == plain  # the same key both ways here: the transform round-trips
    for at in (10, 30, len(sealed) - 1):  # the tag, the nonce / header, the message
        tampered = sealed[:at] + bytes([sealed[at] ^ 1]) + sealed[at + 1 :]
        with pytest.raises(smb_wire.WireError):
            wire._decrypted(tampered)

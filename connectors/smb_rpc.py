"""The server's directory and descriptors over DCE/RPC on IPC$ (connectors.smb's session): SAMR for the
users and the domain groups each one is in, SRVSVC for the share's ACL, LSA for the names of other
SIDs, and the parser of self-relative security descriptors.

`Unavailable` is raised where the pass must fail (the SAM is not the one domain expected); connectors.smb
turns every other failure of the directory into its own SmbUnavailable.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from connectors.nt_acl import Ace, Descriptor, SamDirectory


class Unavailable(Exception):
    """The server's directory is not usable: the pass fails."""


def directory(conn: Any, target: Any) -> SamDirectory:
    """The server's own domain (not Builtin): its users, their domain groups, its groups."""
    from impacket.dcerpc.v5 import samr

    rpc = _pipe(conn, target, r"\samr")
    dce = rpc.get_dce_rpc()
    dce.connect()
    try:
        dce.bind(samr.MSRPC_UUID_SAMR)
        server = samr.hSamrConnect(dce)["ServerHandle"]
        domains = [d["Name"] for d in samr.hSamrEnumerateDomainsInSamServer(dce, server)["Buffer"]["Buffer"]]
        own = [d for d in domains if d.lower() != "builtin"]
        if len(own) != 1:
            raise Unavailable(f"{target.where()}: expected one SAM domain besides Builtin, found {own}")
        domain_id = samr.hSamrLookupDomainInSamServer(dce, server, own[0])["DomainId"]
        domain_sid = domain_id.formatCanonical()
        handle = samr.hSamrOpenDomain(dce, server, domainId=domain_id)["DomainHandle"]
        groups = {
            f"{domain_sid}-{g['RelativeId']}": str(g["Name"])
            for g in _enumerate(dce, samr.hSamrEnumerateGroupsInDomain, handle)
        }
        users: dict[str, tuple[str, frozenset[str]]] = {}
        for u in _enumerate(dce, samr.hSamrEnumerateUsersInDomain, handle):
            user = samr.hSamrOpenUser(dce, handle, samr.MAXIMUM_ALLOWED, u["RelativeId"])["UserHandle"]
            member = samr.hSamrGetGroupsForUser(dce, user)["Groups"]["Groups"]
            # Not closed one by one (a round trip per user each pass): the server frees every
            # handle of the pipe when it is closed below.
            users[f"{domain_sid}-{u['RelativeId']}"] = (
                str(u["Name"]),
                frozenset(f"{domain_sid}-{g['RelativeId']}" for g in member),
            )
        return SamDirectory(domain_sid, users, groups)
    finally:
        dce.disconnect()


def share_descriptor(conn: Any, target: Any) -> Descriptor | None:
    """The share's ACL when the server hands it out (NetrShareGetInfo 502), else None."""
    from impacket.dcerpc.v5 import srvs

    rpc = _pipe(conn, target, r"\srvsvc")
    dce = rpc.get_dce_rpc()
    dce.connect()
    try:
        dce.bind(srvs.MSRPC_UUID_SRVS)
        info = srvs.hNetrShareGetInfo(dce, target.share + "\x00", 502)["InfoStruct"]["ShareInfo502"]
        raw = info["shi502_security_descriptor"]
        data = raw if isinstance(raw, bytes) else b"".join(raw or [])
        return parse_descriptor(data) if data else None
    except Exception:  # not allowed to ask: the same as not handed out
        return None
    finally:
        dce.disconnect()


def names(conn: Any, target: Any, sids: Collection[str]) -> dict[str, str]:
    """Display names for SIDs (LSA LookupSids); those the server cannot name are left out."""
    from impacket.dcerpc.v5 import lsad, lsat
    from impacket.dcerpc.v5.dtypes import MAXIMUM_ALLOWED

    if not sids:
        return {}
    rpc = _pipe(conn, target, r"\lsarpc")
    dce = rpc.get_dce_rpc()
    dce.connect()
    try:
        dce.bind(lsat.MSRPC_UUID_LSAT)
        policy = lsad.hLsarOpenPolicy2(dce, MAXIMUM_ALLOWED | lsat.POLICY_LOOKUP_NAMES)["PolicyHandle"]
        ordered = sorted(sids)
        try:
            reply = lsat.hLsarLookupSids(dce, policy, ordered, lsat.LSAP_LOOKUP_LEVEL.LsapLookupWksta)
        except Exception as exc:  # STATUS_SOME_NOT_MAPPED carries the partial answer
            reply = getattr(exc, "get_packet", lambda: None)()
            if reply is None:
                return {}
        domains = reply["ReferencedDomains"]["Domains"]
        found: dict[str, str] = {}
        for sid, item in zip(ordered, reply["TranslatedNames"]["Names"], strict=False):
            index = item["DomainIndex"]
            domain = str(domains[index]["Name"]) if 0 <= index < len(domains) else ""
            if item["Name"]:
                found[sid] = f"{domain}\\{item['Name']}" if domain else str(item["Name"])
        return found
    except Exception:
        return {}
    finally:
        dce.disconnect()


FSCTL_PIPE_TRANSCEIVE = 0x0011C017
SMB2_0_IOCTL_IS_FSCTL = 0x1


def _pipe(conn: Any, target: Any, name: str) -> Any:
    """A DCE/RPC transport on the session whose calls are one round trip (FSCTL_PIPE_TRANSCEIVE: the
    request written and its first reply fragment read in one SMB2 IOCTL) instead of a write and a
    read. Why: a pass asks SAMR two calls per user, the longest part of a pass once descriptors are
    pipelined. Further fragments of a long reply, and SMB1, go impacket's way (read)."""
    from impacket.dcerpc.v5 import transport
    from impacket.smb3 import SMB3

    class Transceive(transport.SMBTransport):  # type: ignore[misc]
        reply: bytes | None = None

        def send(self, data: bytes, forceWriteAndx: int = 0, forceRecv: int = 0) -> None:
            smb = conn._SMBConnection
            if not isinstance(smb, SMB3) or (self._max_send_frag and len(data) > self._max_send_frag):
                super().send(data, forceWriteAndx, forceRecv)
                return
            self.reply = bytes(
                smb.ioctl(
                    self._SMBTransport__tid,
                    self._SMBTransport__handle,
                    FSCTL_PIPE_TRANSCEIVE,
                    SMB2_0_IOCTL_IS_FSCTL,
                    data,
                    maxInputResponse=0,
                    maxOutputResponse=65536,
                )
            )

        def recv(self, forceRecv: int = 0, count: int = 0) -> bytes:
            if self.reply is not None:
                reply, self.reply = self.reply, None
                return reply
            return bytes(super().recv(forceRecv, count))

    return Transceive(target.server, target.port, name, smb_connection=conn)


def _enumerate(dce: Any, call: Callable[..., Any], handle: Any) -> list[Any]:
    from impacket.dcerpc.v5 import samr
    from impacket.nt_errors import STATUS_MORE_ENTRIES

    found: list[Any] = []
    context = 0
    while True:
        try:
            reply = call(dce, handle, enumerationContext=context)
        except samr.DCERPCSessionError as exc:
            if exc.get_error_code() != STATUS_MORE_ENTRIES:
                raise
            reply = exc.get_packet()
        found.extend(reply["Buffer"]["Buffer"] or [])
        if reply["ErrorCode"] != STATUS_MORE_ENTRIES:
            return found
        context = reply["EnumerationContext"]


def parse_descriptor(raw: bytes) -> Descriptor:
    """A self-relative security descriptor (MS-DTYP 2.4.6): owner and DACL. Raises ValueError."""
    from impacket.ldap import ldaptypes

    try:
        sd = ldaptypes.SR_SECURITY_DESCRIPTOR(data=raw)
        owner = sd["OwnerSid"].formatCanonical() if sd["OffsetOwner"] else None
        if not sd["OffsetDacl"]:
            return Descriptor(owner, None)
        aces = []
        for ace in sd["Dacl"].aces:
            kind = ace["AceType"]
            if kind not in (0x00, 0x01):  # allowed, denied; object and callback ACEs are not file ACEs
                raise ValueError(f"unexpected ACE type {kind:#x}")
            aces.append(
                Ace(
                    kind == 0x00,
                    ace["Ace"]["Sid"].formatCanonical(),
                    int(ace["Ace"]["Mask"]["Mask"]),
                    int(ace["AceFlags"]),
                )
            )
        return Descriptor(owner, tuple(aces))
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"unreadable security descriptor: {short(exc)}") from None


def short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]

"""The group a member's data dir belongs to, kept in the data dir (`dledger/membership`).

A member's log is only meaningful within its group: restarted with another peer list (itself
alone, say), it would elect itself, commit entries no other member holds, and later meet the
real group with a log that forks from theirs below its commit. So the first start writes the
membership (the group's name, this member's id, every member's id), and every later start
compares: another group name, another id for this member, or another set of member ids is
refused, naming both. Addresses are not part of it: a member may move to another host or port
without changing the group.

`override` (the setting `dledger_membership_override`) is the operator's way to change the
group on purpose: the new membership is written and the start goes on.

The file: JSON, replaced atomically (temp file, fsync, rename, directory fsync).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ha.dledger.core.peers import Peer
from store.checkpoint import write_file_atomically
from store.errors import StoreCorruptError
from store.files.disk import REAL_DISK, Disk

log = logging.getLogger(__name__)

_FORMAT_VERSION = 1


class MembershipMismatch(Exception):  # noqa: N818 (a refusal, not a failure)
    """This start's group membership is not the one the data dir belongs to."""


@dataclass(frozen=True, slots=True)
class Membership:
    group: str
    self_id: str
    peers: tuple[tuple[str, str], ...]  # (id, address), as the peer string lists them

    @property
    def member_ids(self) -> frozenset[str]:
        return frozenset(node_id for node_id, _ in self.peers)

    def describe(self) -> str:
        listed = ";".join(f"{node_id}-{address}" for node_id, address in self.peers)
        return f"group {self.group!r}, self {self.self_id!r}, peers {listed}"

    def same_group(self, other: Membership) -> bool:
        return (self.group, self.self_id, self.member_ids) == (
            other.group, other.self_id, other.member_ids)


def membership_of(group: str, self_id: str, peers: Sequence[Peer]) -> Membership:
    return Membership(group, self_id, tuple((peer.node_id, peer.address) for peer in peers))


def read_membership(path: Path) -> Membership | None:
    """The stored membership, None when the file does not exist (a first start)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        document = json.loads(raw)
        assert document["version"] == _FORMAT_VERSION
        return Membership(str(document["group"]), str(document["self_id"]),
                          tuple((str(node_id), str(address))
                                for node_id, address in document["peers"]))
    except (ValueError, KeyError, TypeError, AssertionError) as error:
        raise StoreCorruptError(f"{path}: not a DLedger membership file ({error})") from None


def write_membership(path: Path, membership: Membership, disk: Disk = REAL_DISK) -> None:
    document = {"version": _FORMAT_VERSION, "group": membership.group,
                "self_id": membership.self_id, "peers": [list(peer) for peer in membership.peers]}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomically(path, json.dumps(document).encode(), disk)


def check_membership(path: Path, membership: Membership, *, override: bool,
                     disk: Disk = REAL_DISK) -> None:
    """Refuse (MembershipMismatch) a start whose membership is not the stored one, unless
    `override`; write the membership when it is new, overridden, or its addresses moved."""
    stored = read_membership(path)
    if stored is not None and not stored.same_group(membership):
        if not override:
            raise MembershipMismatch(
                f"this data dir belongs to {stored.describe()}; this start names "
                f"{membership.describe()}. A member started with another peer list would elect "
                "itself among the wrong peers and fork its log from its group's. Start it with "
                "the group's peer list, or set dledger_membership_override = true to change "
                "the group on purpose (docs/dledger.md, \"Membership\")")
        log.warning("dledger: membership overridden: was %s, now %s", stored.describe(),
                    membership.describe())
    if stored != membership:
        write_membership(path, membership, disk)

"""Classic replication seen from the admin API: `/admin/ha`, `/admin/diff`, promote and demote."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator
from pydantic.dataclasses import dataclass

from app.api.schemas.dledger import DLedgerView
from app.api.schemas.fields import STRICT
from app.api.schemas.sync import MetadataSyncStatus
from ha import SlaveLinkView, SlaveView


class SlaveDiff(BaseModel):
    address: str
    slave_id: str = Field(description="the slave's stable id (hex), kept in its data dir")
    state: str
    ack_offset: int
    diff_bytes: int
    in_sync: bool


class MasterDiffView(BaseModel):
    master_max_offset: int
    epoch: int = Field(description="this master's current epoch (one more per start as "
                                   "master or promotion)")
    max_diff_bytes: int
    in_sync_slave_count: int
    slaves_needed: int
    slaves: list[SlaveDiff]


# The slave's link as ha/client.py keeps it: SlaveLinkView's fields, in its order, with the
# descriptions the spec shows and the slave's metadata sync after them. A pydantic dataclass,
# as only a dataclass takes a dataclass's fields; kw_only, as a field redeclared with Field()
# has no default; no docstring, which would be the spec's description.
@dataclass(frozen=True, kw_only=True)
class SlaveDiffView(SlaveLinkView):
    master_epoch: int = Field(description="the master's epoch at the last connect")
    refusal: str | None = Field(description="why the master last refused to stream to this "
                                            "slave: needs_reset or diverged; null when it "
                                            "streams")
    truncated_bytes_total: int = Field(description="bytes this slave cut back to agree with "
                                                   "its master's epochs, since start")
    apply_error: str | None = Field(
        None, description="Why the slave is not applying the master's bytes now (its disk is "
        "full: CREATE_MAPPED_FILE_FAILED, or a write fault); null while it applies them")
    metadata_sync: MetadataSyncStatus | None


class DiffView(BaseModel):
    """Master: per-slave diff in bytes (master max offset - slave ack offset). Slave: its own
    view of the link. Exactly one of `master` and `slave` is set, by role. DLedger mode:
    `role` is the member's (LEADER, FOLLOWER, ...), a leader's peers are `master.slaves`, and
    `dledger` lists every peer (docs/dledger.md)."""

    role: str
    master: MasterDiffView | None = None
    slave: SlaveDiffView | None = None
    dledger: DLedgerView | None = None


# One slave's connection as ha/connection.py keeps it (SlaveView), described as the spec shows
# it; a pydantic dataclass for the reasons SlaveDiffView gives.
@dataclass(frozen=True, kw_only=True)
class SlaveConnection(SlaveView):
    slave_id: str = Field(description="the slave's stable id (hex); empty during the handshake")


class RejectedSlaveView(BaseModel):
    address: str
    state: str
    reason: str
    request_offset: int


class MasterHaView(BaseModel):
    listen_address: str
    epoch: int
    authenticated: bool = Field(description="whether the HA link requires the shared secret")
    connection_count: int = Field(description="slaves holding a slot (past the handshake)")
    master_max_offset: int
    in_sync_slave_count: int
    slaves_needed: int
    slaves: list[SlaveConnection]
    rejected: list[RejectedSlaveView]


class HaView(BaseModel):
    role: str
    master: MasterHaView | None = None
    slave: SlaveDiffView | None = None
    dledger: DLedgerView | None = Field(
        default=None, description="DLedger mode: the member's view (master and slave are null)")


class PromoteRequest(BaseModel):
    """Make this slave a master, in a new epoch. Refused (409) while its master is still
    connected unless `force`: a forced promotion can lose what the old master acknowledged
    and this slave never received."""

    model_config = STRICT
    role: Literal["SYNC_MASTER", "ASYNC_MASTER"] = "SYNC_MASTER"
    force: bool = False


class DemoteRequest(BaseModel):
    """Make this master a slave of another broker; what this log holds beyond the point
    where it agrees with the new master's epochs is cut back."""

    model_config = STRICT
    master_ha_address: Annotated[str, StringConstraints(
        pattern=r"^[A-Za-z0-9.\-]+:[0-9]{1,5}$", max_length=255)] = Field(
        examples=["127.0.0.1:10912"])
    master_http_address: Annotated[str, StringConstraints(
        pattern=r"^https?://[^\s/]+$", max_length=255)] = Field(
        examples=["http://127.0.0.1:8080"])

    @field_validator("master_ha_address")
    @classmethod
    def _port_in_range(cls, address: str) -> str:
        port = int(address.rpartition(":")[2])
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port} is not in 1..65535")
        return address


class RoleChangeView(BaseModel):
    role: str
    epoch: int | None = Field(None, description="the new epoch, after a promotion")

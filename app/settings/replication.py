"""Replication settings: the classic HA link and DLedger mode."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.settings.values import MIB, Port, ReplicationMode
from ha.dledger.host.host_config import HostConfig

_HOST = HostConfig()  # the DLedger host's defaults, in ms


class ReplicationFields(BaseModel):
    """Settings of replication, classic and DLedger (a part of `Settings`)."""

    # -- replication ---------------------------------------------------------------------------
    ha_listen_host: str = Field("127.0.0.1", description="address a master's HA port listens "
                                "on for slaves")
    ha_listen_port: Port = Field(10912, description="a master's HA port (0: the kernel picks "
                                 "one)")
    ha_master_address: str | None = Field(None, description="host:port of the master's HA port; "
                                          "required on a SLAVE")
    ha_secret: str | None = Field(None, description="shared secret of the HA link (mutual "
                                  "authentication, every frame tagged); required unless "
                                  "ha_allow_unauthenticated")
    ha_allow_unauthenticated: bool = Field(False, description="run the HA link without a "
                                           "secret (anyone who reaches it can read the log)")
    ha_handshake_timeout_ms: int = Field(2000, description="how long a new HA connection may "
                                         "take to finish the handshake")
    ha_handshakes_max: int = Field(8, description="HA connections still in the handshake at "
                                   "once; a new one past it drops the oldest")
    ha_connections_max: int = Field(16, description="slaves connected at once (slots are "
                                    "given after the handshake); more are refused")
    in_sync_replicas: int = Field(2, description="copies a SYNC_MASTER put needs, the master "
                                  "included: in_sync_replicas - 1 distinct slaves must ack it")
    slave_timeout_ms: int = Field(3000, description="how long a SYNC_MASTER put waits for its "
                                  "slave acks before answering FLUSH_SLAVE_TIMEOUT")
    ha_slave_fall_behind_bytes_max: int = Field(
        256 * MIB, description="a slave further behind than this is not in sync; a SYNC_MASTER "
                               "put without enough in-sync slaves answers SLAVE_NOT_AVAILABLE; "
                               "retention keeps files only for slaves (DLedger: peers) within it")
    ha_send_heartbeat_interval_ms: int = Field(5000, description="an idle HA link sends a "
                                               "heartbeat (or offset report) this often")
    ha_housekeeping_interval_ms: int = Field(20_000, description="an HA link silent this long "
                                             "is closed; must be > the heartbeat interval")
    ha_reconnect_interval_ms: int = Field(5000, description="a slave waits this long before "
                                          "reconnecting to its master")
    ha_connect_timeout_ms: int = Field(3000, description="a slave's TCP connect timeout to its "
                                       "master")
    # -- DLedger mode (docs/dledger.md, "Running a DLedger group") -----------------------------
    replication_mode: ReplicationMode = Field(
        ReplicationMode.CLASSIC, description="classic (broker_role: master/slave over the HA "
        "port) or dledger (a Raft group of dledger_peers elects its leader; broker_role and "
        "the ha_* settings are not used)")
    dledger_group: str = Field("default", min_length=1, max_length=64,
                               pattern=r"^[A-Za-z0-9_.-]+$",
                               description="the DLedger group's name (bound into the peer "
                                           "handshake: members of another group are refused)")
    dledger_self_id: str | None = Field(None, description="this member's id, one of "
                                        "dledger_peers (required in dledger mode)")
    dledger_peers: str | None = Field(
        None, description="every member's DLedger port as DLedger writes it: "
                          "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913")
    dledger_http_peers: str | None = Field(
        None, description="every member's HTTP gateway, same ids and format "
                          "(n0-127.0.0.1:8080;...): a follower names the leader's in its 503 "
                          "and pulls metadata from it")
    dledger_secret: str | None = Field(None, description="shared secret of the group's peer "
                                       "port (mutual authentication, every frame tagged); "
                                       "required unless dledger_allow_unauthenticated")
    dledger_allow_unauthenticated: bool = Field(False, description="run the DLedger port "
                                                "open (anyone who reaches it can vote and "
                                                "push entries)")
    dledger_membership_override: bool = Field(
        False, description="start even though dledger_group, dledger_self_id or the ids of "
        "dledger_peers differ from the membership stored in the data dir (refused otherwise), "
        "and store the new one: a deliberate change of the group")
    dledger_listen_fd: int | None = Field(
        None, ge=0, description="a bound TCP socket inherited from the parent to serve the "
                                "DLedger port on (tests, supervisors); default: bind this "
                                "member's address in dledger_peers")
    dledger_tick_ms: int = Field(_HOST.tick_ms, description="the DLedger loop's tick; every "
                                 "time below is rounded up to whole ticks")
    dledger_election_timeout_ms: int = Field(
        _HOST.election_timeout_ms, description="a follower that heard no leader for a random "
        "time in [this, 2 x this) starts an election; the leader's check-quorum window")
    dledger_heartbeat_interval_ms: int = Field(_HOST.heartbeat_interval_ms, description="an "
                                               "idle leader pushes a heartbeat this often")
    dledger_push_timeout_ms: int = Field(_HOST.push_timeout_ms, description="an unanswered "
                                         "push is sent again after this")
    dledger_quorum_deadline_ms: int = Field(
        _HOST.quorum_deadline_ms, description="a produce not committed by a quorum within this "
        "answers 202 COMMIT_INDETERMINATE (it may still commit, or be lost)")
    dledger_transfer_catchup_ms: int = Field(
        _HOST.transfer_catchup_ms, description="a leadership transfer whose target is not "
        "caught up within this is refused (NOT_CAUGHT_UP)")
    dledger_pending_appends_max: int = Field(
        _HOST.pending_appends_max, ge=1, le=1_000_000,
        description="produces waiting for a quorum at once; past it 429 OS_PAGE_CACHE_BUSY")

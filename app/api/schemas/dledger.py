"""The API's models of DLedger mode: `GET /admin/dledger`, the per-peer part of `/admin/diff`,
and `POST /admin/dledger/transfer-leadership` (docs/dledger.md, "Running a DLedger group")."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas.sync import MetadataSyncStatus


class DLedgerPeerView(BaseModel):
    """One other member, as this member sees it. The replication fields are the leader's view
    of the peer: null on a follower."""

    peer_id: str
    dledger_address: str = Field(description="host:port of its DLedger port")
    http_address: str = Field(description="its gateway's URL")
    match_index: int | None = Field(description="the last entry the peer is known to hold")
    lag_entries: int | None = Field(description="entries the leader holds past the match")
    lag_bytes: int | None = Field(description="commit-log bytes the leader holds past the "
                                              "match (null when unknown: the match is below "
                                              "the leader's log base)")
    inflight_pushes: int | None = Field(description="pushes sent and not yet answered")
    dispatcher_state: str | None = Field(description="COMPARE, TRUNCATE, APPEND or COMMIT")
    last_contact_ms_ago: int | None = Field(description="since a message from the peer "
                                                        "reached this member; null: never")


class DLedgerView(BaseModel):
    self_id: str
    group: str
    role: str = Field(description="LEADER, FOLLOWER, PRE_CANDIDATE or CANDIDATE")
    accepting_writes: bool = Field(description="a leader that caught up in its term (its "
                                               "commit and idempotency window): it takes "
                                               "produces and metadata writes")
    term: int
    leader_id: str | None = Field(description="null while no leader is known")
    leader_http_address: str | None = Field(description="the leader's gateway: writes go there")
    leader_dledger_address: str | None
    committed_index: int = Field(description="entries up to it are committed: reads, consume "
                                             "queues and snapshots stop there")
    end_index: int = Field(description="the last entry in this member's log (committed or not)")
    base_index: int = Field(description="the log holds the entries after it: retention "
                                         "compacted the rest (a peer below it is reset from it)")
    min_offset: int = Field(description="the first commit-log offset retained")
    retention_blocked_offset: int | None = Field(
        description="where retention stopped to keep what a lagging peer still needs (null: "
                    "not blocked)")
    committed_offset: int | None = Field(description="the commit-log offset reads stop at "
                                                     "(null until the first commit after a "
                                                     "start)")
    max_offset: int = Field(description="the commit-log end, uncommitted entries included")
    pending_appends: int = Field(description="produces waiting for a quorum on this member")
    inbox_dropped_count: int
    elections_started_count: int = Field(description="elections this member stood in as a "
                                                     "candidate since it started")
    last_error: str | None
    diverged: str | None = Field(
        default=None, description="why this member's committed log is not its leader's (a "
                                  "fork: it led alone under another peer list); null when "
                                  "it is. While set, /readyz answers 503")
    forks_cut_count: int = Field(
        default=0, description="times this member cut entries a previous run had committed "
                               "alone and dispatched, to take its group's (a fork repaired)")
    metadata_sync: MetadataSyncStatus | None = Field(
        description="a follower's metadata sync from the leader (null on the leader)")
    peers: list[DLedgerPeerView]


class TransferLeadershipRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    target_id: str = Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9_]+$",
                           description="the member to hand leadership to")


class TransferLeadershipView(BaseModel):
    status: str = Field(description="OK: the target started a new term and this member "
                                    "follows")
    target_id: str
    leader_id: str | None = Field(description="the leader this member knows after the "
                                              "transfer")

"""Metadata settings: the slave's pull from its master, the metadata database and its bounds."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class MetadataFields(BaseModel):
    """Settings of metadata and its sync (a part of `Settings`)."""

    # -- slave metadata sync -------------------------------------------------------------------
    master_http_address: str | None = Field(None, description="http://host:port of the "
                                            "master's gateway; a SLAVE pulls topics, groups "
                                            "and offsets from it (required on a SLAVE)")
    master_auth_token: str | None = Field(None, description="bearer token (admin scope) a "
                                          "slave sends to the master's admin API")
    slave_sync_interval_s: float = Field(60.0, gt=0, description="how often a slave pulls the "
                                         "master's metadata")
    slave_sync_timeout_s: float = Field(5.0, gt=0, le=60, description="timeout of one metadata "
                                        "request to the master")
    metadata_snapshot_records_max: int = Field(
        100_000, ge=0, description="a master writes a snapshot of its metadata tables into the "
        "log once this many metadata records (offset commits, topic and group changes) follow "
        "the last one, bounding what a rebuild or a start replays (0: only when retention "
        "needs one)")
    master_ca_file: Path | None = Field(None, description="PEM CA bundle that verifies an https "
                                        "master_http_address (default: the system's CAs)")
    # -- metadata ------------------------------------------------------------------------------
    database_url: str | None = Field(None, description="SQLAlchemy URL of the metadata "
                                     "database; default: SQLite, metadata.sqlite3 in data_dir")
    auto_create_topics: bool = Field(True, description="a produce to an unknown topic creates "
                                     "it with default_queue_count queues")
    auto_create_groups: bool = Field(True, description="an offset commit for an unknown "
                                     "consumer group creates the group")
    default_queue_count: int = Field(4, ge=1, le=1024, description="queues of a topic created "
                                     "without a count")
    # Every topic costs a metadata row, directories and, per queue, consume-queue files and
    # memory: both counts are bounded, and past them creation answers 409/400 naming them.
    topics_max: int = Field(10_000, ge=1, le=10_000_000, description="topics this broker "
                            "holds; creating one more answers 409 TOPICS_MAX_REACHED")
    queues_per_topic_max: int = Field(128, ge=1, le=1024, description="queues one topic may "
                                      "have; more answers 400 QUEUES_PER_TOPIC_MAX_EXCEEDED")
    groups_max: int = Field(10_000, ge=1, le=10_000_000, description="subscription groups "
                            "this broker holds; creating one more (or committing an offset "
                            "for a new one) answers 409 GROUPS_MAX_REACHED")
    consumer_offset_persist_interval_ms: int = Field(5000, gt=0, description="how often "
                                                     "committed consumer offsets are written "
                                                     "to the metadata database")

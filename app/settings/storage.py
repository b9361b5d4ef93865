"""The store's settings: data dir, role, flush, files, retention, queues and indexes."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from app.settings.values import GIB, MIB
from store import BrokerRole, FlushDiskType


class StoreFields(BaseModel):
    """Settings of the store (a part of `Settings`)."""

    # -- store ---------------------------------------------------------------------------------
    data_dir: Path = Field(Path("data"), description="commit log, consume queues, checkpoint "
                           "and (by default) the metadata database and snapshots")
    broker_role: BrokerRole = Field(BrokerRole.ASYNC_MASTER, description="ASYNC_MASTER, "
                                    "SYNC_MASTER (a put waits for in_sync_replicas) or SLAVE")
    flush_disk_type: FlushDiskType = Field(FlushDiskType.ASYNC_FLUSH, description="ASYNC_FLUSH "
                                           "(answer at once, msync every flush_interval_ms) or "
                                           "SYNC_FLUSH (a put waits for its msync); in DLedger "
                                           "mode the same for every member's acknowledgement")
    mapped_file_size_bytes: int = Field(GIB, description="size of each commit-log file (each "
                                        "is reserved on disk whole, and the next one ahead); "
                                        "must hold the largest record. A data dir keeps the "
                                        "size its files were created with; `twinlog dev` "
                                        "uses 64 MiB")
    message_size_max_bytes: int = Field(4 * MIB, description="largest message body accepted")
    flush_interval_ms: int = Field(500, description="how often the flush service msyncs the "
                                   "commit log (the group-commit period under SYNC_FLUSH)")
    sync_flush_timeout_ms: int = Field(5000, description="how long a SYNC_FLUSH put waits for "
                                       "its msync before answering FLUSH_DISK_TIMEOUT")
    max_pending_puts: int = Field(10_000, description="puts waiting for a flush or a slave at "
                                  "once; past it a put answers OS_PAGE_CACHE_BUSY")
    file_reserved_hours: float = Field(72.0, description="retention: a commit-log file older "
                                       "than this (by mtime) is removed")
    disk_max_used_ratio: float = Field(0.75, description="retention: past this used fraction "
                                       "of the data disk the oldest files are removed early")
    consume_queue_entries_per_file: int = Field(
        300_000, ge=1, le=50_000_000,
        description="20-byte entries per consume-queue file; its blocks are reserved in steps "
                    "of consume_queue_reserve_step_bytes as entries arrive, not whole")
    consume_queue_reserve_step_bytes: int = Field(
        16 * 1024, ge=4096, le=1 << 30,
        description="how much of a consume-queue file is reserved at a time (a put reserves "
                    "its entry's step before it is acknowledged)")
    disk_reserve_bytes: int = Field(
        64 << 20, ge=0, le=1 << 40,
        description="free disk the commit log leaves when it creates a file, for the consume "
                    "queues and indexes of what it acknowledged; past it puts answer 507 "
                    "CREATE_MAPPED_FILE_FAILED until space returns")
    consume_queue_open_files_max: int = Field(
        256, ge=1, le=1_000_000,
        description="consume-queue files mapped at once (2 descriptors each); the least "
                    "recently used idle queues are closed past it")
    consume_cache_bytes_max: int = Field(
        32 << 20, ge=0, le=1 << 40,
        description="memory for the consumed messages' answer documents a consume read keeps, "
                    "by record, for the next read of them (another group, a retry); the "
                    "oldest kept go first; 0 keeps none")
    key_index_slot_count: int = Field(
        250_000, ge=1, le=2**31,
        description="hash slots per key-index file (4 bytes each); more slots, shorter chains")
    key_index_entries_per_file: int = Field(
        1_000_000, ge=1, le=2**32 - 2,
        description="keys per key-index file (24 bytes each, reserved whole); a full file "
                    "rolls to a new one, removed once retention passes it")

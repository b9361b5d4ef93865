"""Every on-disk path of a store, in one place. File names are 20-digit start offsets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

OFFSET_NAME_DIGITS = 20
TEMP_SUFFIX = ".tmp"


def offset_to_name(offset: int) -> str:
    assert 0 <= offset < 10**OFFSET_NAME_DIGITS, offset
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def name_to_offset(name: str) -> int | None:
    """The start offset a file name encodes, or None for a name that is not one of ours."""
    if len(name) != OFFSET_NAME_DIGITS or not name.isdigit() or not name.isascii():
        return None
    return int(name)


@dataclass(frozen=True, slots=True)
class StorePaths:
    root: Path

    @property
    def commit_log_dir(self) -> Path:
        return self.root / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.root / "consumequeue"

    def consume_queue_for(self, topic: str, queue_id: int) -> Path:
        return self.consume_queue_dir / topic / str(queue_id)

    @property
    def commit_log_file_size(self) -> Path:
        """The file size the commit log keeps (store/files/log_file_size.py)."""
        return self.root / "commitlog_file_size"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def deleted_topics(self) -> Path:
        return self.root / "deleted_topics.json"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def abort_marker(self) -> Path:
        return self.root / "abort"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def metadata_database(self) -> Path:
        return self.root / "metadata.sqlite3"

    @property
    def broker_file(self) -> Path:
        """Which broker runs on this data dir (store/broker_file.py)."""
        return self.root / "broker.json"

    @property
    def ha_node_id(self) -> Path:
        return self.root / "ha_node_id"

    @property
    def ha_epochs(self) -> Path:
        return self.root / "ha_epochs"

    @property
    def dledger_index_dir(self) -> Path:
        return self.root / "dledger" / "index"

    @property
    def dledger_hard_state(self) -> Path:
        return self.root / "dledger" / "hard_state"

    @property
    def dledger_log_base(self) -> Path:
        return self.root / "dledger" / "log_base"

    @property
    def dledger_membership(self) -> Path:
        return self.root / "dledger" / "membership"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    def ensure(self) -> None:
        self.commit_log_dir.mkdir(parents=True, exist_ok=True)
        self.consume_queue_dir.mkdir(parents=True, exist_ok=True)

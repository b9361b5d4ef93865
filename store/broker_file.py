"""`broker.json` in a data dir: the broker that runs on it, by role, name and group.

A running broker knows these from its settings; a data dir at rest did not keep them, so an
export of a stopped broker's data dir (`twinlog export`) wrote a default role and name into
its snapshot. The broker writes this small file when it starts and whenever its role changes
(a promotion, a demotion), atomically; the export reads it. It is informational: nothing
else reads it, and a missing or unreadable file only means the export is told by flags.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from store.checkpoint import write_file_atomically
from store.paths import StorePaths

FILE_BYTES_MAX = 4096  # a few short strings; a larger file is not ours


@dataclass(frozen=True, slots=True)
class BrokerFile:
    broker_name: str  # as its snapshots name it: the gateway's host:port
    broker_role: str  # ASYNC_MASTER, SYNC_MASTER, SLAVE; DLEDGER for a DLedger member
    broker_group: str  # the group a master and its slaves share


def write_broker_file(data_dir: Path, broker: BrokerFile) -> None:
    text = json.dumps(asdict(broker), indent=1, sort_keys=True) + "\n"
    write_file_atomically(StorePaths(data_dir).broker_file, text.encode())


def read_broker_file(data_dir: Path) -> BrokerFile | None:
    """The broker file of `data_dir`, or None when there is none (a data dir from before the
    file was written) or it is not one."""
    path = StorePaths(data_dir).broker_file
    try:
        with path.open("rb") as stream:
            raw = stream.read(FILE_BYTES_MAX + 1)
        if len(raw) > FILE_BYTES_MAX:
            return None
        values = json.loads(raw)
        return BrokerFile(**{name: str(values[name])
                             for name in ("broker_name", "broker_role", "broker_group")})
    except (OSError, ValueError, TypeError, KeyError):
        return None

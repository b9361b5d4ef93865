"""A broker's stable identity for replication: 16 random bytes made once and kept in its data
dir.

The master counts acknowledgements per slave id, not per connection, so a slave that
reconnects (or leaves a half-open connection behind) is still one slave; an epoch names the
broker that was master by the same id.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from ha.auth import SLAVE_ID_SIZE
from store.checkpoint import write_file_atomically
from store.errors import ConfigError
from store.paths import StorePaths


def load_or_create_node_id(data_dir: Path) -> bytes:
    path = StorePaths(data_dir).ha_node_id
    if not path.exists():
        write_file_atomically(path, secrets.token_hex(SLAVE_ID_SIZE).encode() + b"\n")
    text = path.read_text().strip()
    try:
        slave_id = bytes.fromhex(text)
    except ValueError:
        slave_id = b""
    if len(slave_id) != SLAVE_ID_SIZE:
        raise ConfigError(f"{path}: expected {SLAVE_ID_SIZE * 2} hex digits, found {text!r}; "
                          "remove the file to give this broker a new identity")
    return slave_id

"""Replication: classic master/slave HA (RocketMQ's HAService, done right).

Knows nothing of HTTP. `Replication.for_role` builds what a broker of a given role runs.
"""

from ha.classic.core.master import RejectedSlave
from ha.client import HAClient, SlaveLinkView
from ha.config import HAConfig
from ha.connection import ConnectionState, SlaveView
from ha.diff import DiffSample, DiffSampler, MasterDiff, master_diff
from ha.node import Replication
from ha.protocol import ProtocolError
from ha.service import HAService

__all__ = [
    "ConnectionState",
    "DiffSample",
    "DiffSampler",
    "HAClient",
    "HAConfig",
    "HAService",
    "MasterDiff",
    "ProtocolError",
    "RejectedSlave",
    "Replication",
    "SlaveLinkView",
    "SlaveView",
    "master_diff",
]

"""DLedger mode: a Raft-replicated log (openmessaging/dledger's design, without its known bugs).

`DLedgerNode` is the whole protocol as a pure state machine (ha/dledger/core/node.py); the host
(`DLedgerHost`, ha/dledger/host/host.py) runs its actions and `PeerTransport` carries its
messages; `DLedgerServer` (ha/dledger/host/server.py) is one member with both.
`ha.dledger.simulation.sim` drives the same node in a seeded deterministic simulation.

This package re-exports nothing: import from the module that defines a name. A broker in
classic mode imports `ha.dledger.core.peers` and the DLedger settings for its settings model,
and must not load the host, the stored log and the node with them (issue 31: about 1.5 MB a
broker would hold idle).
"""

"""Epochs: where a slave's log agrees with its master's, and repair instead of divergence."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from ha.epochs import (
    Agreement,
    Epoch,
    begin_epoch,
    decide,
    load_history,
    save_history,
)
from ha.identity import load_or_create_node_id
from store import BrokerRole, Message, MessageStore
from store.paths import StorePaths
from tests.support.ha import Node, same_bytes, wait_caught_up
from tests.support.power_cut import lose_tail
from tests.support.store import wait_dispatched, wait_until

StartNode = Callable[..., Node]
A, B, C = b"a" * 16, b"b" * 16, b"c" * 16


# -- the decision, as a pure function -------------------------------------------------------


def test_an_empty_slave_starts_from_the_beginning() -> None:
    """A slave with no bytes agrees at 0, whatever its history says."""
    assert decide([Epoch(1, 0, A)], 500, 0, [], 0).agreed_offset == 0


def test_a_slave_ahead_of_a_master_that_lost_its_tail_cuts_back() -> None:
    """The master wrote to 900 in epoch 1, recovered to 600 and began epoch 2 there: a slave
    holding epoch 1 up to 900 agrees only up to 600."""
    master = begin_epoch([Epoch(1, 0, A)], 600, A)
    assert master == [Epoch(1, 0, A), Epoch(2, 600, A)]
    decision = decide(master, 2000, 0, [Epoch(1, 0, A)], 900)
    assert decision.agreement is Agreement.AGREED and decision.agreed_offset == 600


def test_a_deposed_master_cuts_back_to_where_its_successor_began() -> None:
    """A slave promoted at 700 (epoch 2, its own id): the old master, which wrote to 900 in
    epoch 1, agrees only up to 700; even if it restarted as master once (its own epoch 2)."""
    new_master = begin_epoch([Epoch(1, 0, A)], 700, B)
    assert decide(new_master, 800, 0, [Epoch(1, 0, A)], 900).agreed_offset == 700
    restarted_old = begin_epoch([Epoch(1, 0, A)], 900, A) + []
    assert restarted_old[-1] == Epoch(2, 900, A)  # same number, another leader
    assert decide(new_master, 800, 0, restarted_old, 950).agreed_offset == 700


def test_a_foreign_slave_is_refused_and_a_slave_behind_retention_needs_a_reset() -> None:
    """No epoch in common: diverged. Agreement below the master's min offset: needs reset."""
    assert decide([Epoch(1, 0, A)], 500, 0, [Epoch(1, 0, C)], 300).agreement is (
        Agreement.DIVERGED)
    assert decide([Epoch(1, 0, A)], 500, 0, [], 300).agreement is Agreement.DIVERGED
    decision = decide([Epoch(1, 0, A)], 5000, 4096, [Epoch(1, 0, A)], 100)
    assert decision.agreement is Agreement.NEEDS_RESET and decision.agreed_offset == 100


def test_a_master_drops_epochs_it_holds_no_byte_of() -> None:
    """Restarting below an epoch's start drops that epoch; numbers still only grow."""
    history = [Epoch(1, 0, A), Epoch(2, 400, B), Epoch(3, 800, A)]
    assert begin_epoch(history, 500, A) == [Epoch(1, 0, A), Epoch(2, 400, B), Epoch(4, 500, A)]
    assert begin_epoch(history, 800, A)[-2:] == [Epoch(3, 800, A), Epoch(4, 800, A)]


def test_history_file_round_trip_and_damage(tmp_path: Path) -> None:
    """The epoch file reads back what was written; a flipped byte is refused by name."""
    path = tmp_path / "ha_epochs"
    history = [Epoch(1, 0, A), Epoch(2, 4096, B)]
    save_history(path, history)
    assert load_history(path) == history
    data = bytearray(path.read_bytes())
    data[8] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="ha_epochs"):
        load_history(path)


# A model of brokers: each log is a list of byte labels (epoch, index) so that any two logs
# can be compared byte for byte; the decision must never keep a byte the master lacks.
_EVENTS = st.lists(st.tuples(st.sampled_from(["write", "replicate", "crash", "failover"]),
                             st.integers(1, 6)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(events=_EVENTS)
def test_the_agreed_offset_is_exactly_the_common_prefix(
        events: list[tuple[str, int]]) -> None:
    """Over any run of writes, partial replication, crashes that lose a tail and failovers,
    the agreed offset is where the two logs stop being equal: never past it (a slave would
    keep bytes the master does not have), never short of it (it would cut good bytes)."""
    ids = [A, B]
    logs: list[list[tuple[int, bytes, int]]] = [[], []]
    histories: list[list[Epoch]] = [begin_epoch([], 0, A), []]
    master = 0
    for kind, amount in events:
        slave = 1 - master
        if kind == "write":
            epoch = histories[master][-1]
            logs[master] += [(epoch.number, epoch.leader_id, len(logs[master]) + i)
                             for i in range(amount)]
        elif kind == "replicate":
            decision = decide(histories[master], len(logs[master]), 0, histories[slave],
                              len(logs[slave]))
            common = _common_prefix(logs[master], logs[slave])
            if decision.agreement is Agreement.DIVERGED:  # e.g. an empty slave was promoted
                assert common == 0
                logs[slave], histories[slave] = [], []  # the operator resets that slave
                continue
            assert decision.agreement is Agreement.AGREED
            agreed = decision.agreed_offset
            assert agreed == common
            end = min(len(logs[master]), agreed + amount)
            logs[slave] = logs[slave][:agreed] + logs[master][agreed:end]
            histories[slave] = list(histories[master])
        elif kind == "crash":  # the master loses a tail and restarts as master
            del logs[master][max(0, len(logs[master]) - amount):]
            histories[master] = begin_epoch(histories[master], len(logs[master]), ids[master])
        else:  # the slave is promoted; the old master will come back as its slave
            master = slave
            histories[master] = begin_epoch(histories[master], len(logs[master]), ids[master])


def _common_prefix(left: list[tuple[int, bytes, int]],
                   right: list[tuple[int, bytes, int]]) -> int:
    length = 0
    for x, y in zip(left, right, strict=False):
        if x != y:
            break
        length += 1
    return length


# -- real stores and sockets -----------------------------------------------------------------


def _queues(store: MessageStore, topic: str) -> list[list[bytes]]:
    wait_dispatched(store)
    return [[m.body for m in store.get_messages(topic, queue_id, 0, 10_000).messages]
            for queue_id in range(4)]


def test_a_slave_holding_bytes_its_master_lost_is_repaired(start_node: StartNode) -> None:
    """The master loses its unflushed tail, restarts (a new epoch) and grows past the slave's
    offset with other bytes: the slave cuts back to where the epochs agree, then ends
    byte-identical with the same consume queues (on a log without epochs it was streamed from
    its own offset and diverged while /admin/diff showed 0)."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    results = [master.store.put_message(Message("R", bytes([i]) * 2000))[0] for i in range(60)]
    wait_caught_up(master.store, slave.store)
    slave_max = slave.store.max_offset
    cut = results[30].commit_log_offset
    slave.stop()
    master.stop()
    lose_tail(master.data_dir, cut)
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    assert master.store.max_offset == cut
    for i in range(60):
        master.store.put_message(Message("R", bytes([100 + i]) * 2500))
    assert master.store.max_offset > slave_max
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    wait_caught_up(master.store, slave.store)
    assert same_bytes(master.store, slave.store)
    client = slave.replication.client
    assert client is not None and client.truncated_bytes_total == slave_max - cut
    assert _queues(slave.store, "R") == _queues(master.store, "R")


def test_a_slave_of_another_master_is_refused_by_name(start_node: StartNode) -> None:
    """A slave whose bytes come from an unrelated master shares no epoch: the master refuses
    to stream (diverged), both sides say so, and the slave's log is left as it was."""
    other = start_node("other", BrokerRole.ASYNC_MASTER)
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{other.ha_port}")
    for i in range(5):
        other.store.put_message(Message("R", bytes([i]) * 100))
    wait_caught_up(other.store, slave.store)
    held = slave.store.max_offset
    slave.stop()
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    for i in range(10):
        master.store.put_message(Message("R", bytes([50 + i]) * 100))
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    client = slave.replication.client
    assert client is not None
    wait_until(lambda: client.refusal == "diverged")
    service = master.replication.service
    assert service is not None
    wait_until(lambda: any(r.state == "diverged" for r in service.rejected))
    assert slave.store.max_offset == held


def test_every_start_as_master_is_a_new_epoch(start_node: StartNode) -> None:
    """A master's epoch file grows by one epoch per start, each at the max offset it had."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    master.store.put_message(Message("R", b"x" * 100))
    end = master.store.max_offset
    master.stop()
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    node_id = load_or_create_node_id(master.data_dir)
    assert load_history(StorePaths(master.data_dir).ha_epochs) == [
        Epoch(1, 0, node_id), Epoch(2, end, node_id)]

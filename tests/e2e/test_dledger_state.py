"""DLedger mode keeps the broker's state, not only its bytes (3 real `twinlog serve` members,
tests/support/dledger_group.py): a topic delete is a record every member applies; the
idempotency window forgets what a truncation removed; a member refuses to start with another
peer list than its group's."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.dledger_group import ROOT, DLedgerGroup, Member, ProxiedGroup, wait_for
from tests.support.queue_reads import produce, queue

pytestmark = pytest.mark.processes

# Elections only when a member is killed or cut off: a member of a group on a loaded machine
# that hears no heartbeat for the default 600 ms would start one, and a test's leader would
# change under it.
QUIET = {"dledger_election_timeout_ms": 1500}


def _by_key(member: Member, topic: str, key: str) -> list[str]:
    response = member.client.get(f"/v1/topics/{topic}/messages",
                                 params={"key": key, "body_encoding": "utf8"})
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    return sorted(m["body"] for m in response.json()["messages"])


def test_a_topic_delete_applies_on_every_member_and_survives_a_leader_kill(
        tmp_path: Path) -> None:
    """4 keyed messages to D, DELETE, 2 more answered at queue offsets 0 and 1: every member's
    queue holds the 2 new ones only and its key index no deleted message; kill -9 the
    leader: the new leader serves the same, and its next produce gets queue offset 2."""
    group = DLedgerGroup(tmp_path, default_queue_count=1, **QUIET)
    try:
        group.start_all()
        leader = group.wait_leader()
        for number in range(4):
            produce(leader, "D", f"old-{number}", keys=["k"])
        deleted = leader.client.delete("/v1/topics/D")
        assert deleted.status_code == 204, deleted.text
        assert [produce(leader, "D", f"new-{number}", keys=["k"])["queue_offset"]
                for number in range(2)] == [0, 1]
        expected = [(0, "new-0"), (1, "new-1")]
        for member in group.members.values():
            wait_for(lambda m=member: queue(m, "D") == expected, 15,
                     f"{member.node_id}'s queue holds the new incarnation only "
                     f"(it holds {queue(member, 'D')})")
            assert _by_key(member, "D", "k") == ["new-0", "new-1"], member.node_id
        group.kill(leader.node_id)
        survivor = group.wait_new_leader(leader)
        assert queue(survivor, "D") == expected
        assert _by_key(survivor, "D", "k") == ["new-0", "new-1"]
        assert produce(survivor, "D", "after")["queue_offset"] == 2
        group.start(leader.node_id)
        final = [*expected, (2, "after")]
        for member in group.members.values():
            wait_for(lambda m=member: queue(m, "D") == final, 30,
                     f"{member.node_id}'s queue equal to the others'")
    finally:
        group.stop_all()


def _leader_of(members: list[Member]) -> Member | None:
    """The member these members all name as leader and that says it leads."""
    views = {member.node_id: member.dledger() for member in members}
    named = {view["leader_id"] for view in views.values()}
    if len(named) != 1:
        return None
    leader_id = named.pop()
    if leader_id not in views or views[leader_id]["role"] != "LEADER" \
            or not views[leader_id]["accepting_writes"]:
        return None
    return next(member for member in members if member.node_id == leader_id)


def _converged(group: DLedgerGroup, leader: Member) -> bool:
    views = [member.dledger() for member in group.members.values()]
    return all(view["leader_id"] == leader.node_id for view in views) and len(
        {(view["end_index"], view["committed_index"]) for view in views}) == 1 \
        and views[0]["end_index"] == views[0]["committed_index"]


def test_a_truncated_indeterminate_put_is_never_replayed(tmp_path: Path) -> None:
    """The leader n is cut off; key K answers 202 COMMIT_INDETERMINATE there; the other two
    elect a leader that stores other messages; after healing n truncates K's record, and
    leadership goes back to n. A retry of K on n then stores K (or replays it only where it
    is): its msg_id names a record with K's body, and K is consumable."""
    group = ProxiedGroup(tmp_path, default_queue_count=1, **QUIET)
    try:
        group.start_all()
        old = group.wait_leader()
        for number in range(3):
            produce(old, "T", f"before-{number}")
        group.isolate(old.node_id)
        with httpx.Client(base_url=old.url, timeout=10.0) as client, \
                ThreadPoolExecutor(2) as pool:
            # Both taken by the cut-off leader before it steps down: neither can commit.
            produced = pool.submit(client.post, "/v1/topics/T/messages",
                                   json={"body": "K-body"}, headers={"idempotency-key": "K"})
            created = pool.submit(client.post, "/v1/topics", json={"name": "Cut"})
            first, topic = produced.result(), created.result()
        assert first.status_code == 202, first.text
        assert first.json()["status"] == "COMMIT_INDETERMINATE", first.text
        # A metadata change answers as a produce does: not known committed, 202.
        assert topic.status_code == 202, topic.text
        assert topic.json()["error_code"] == "COMMIT_INDETERMINATE", topic.text
        others = [member for member in group.members.values() if member is not old]
        found: list[Member] = []
        wait_for(lambda: bool(leader := _leader_of(others)) and not found.append(leader),
                 20, "a leader of the two connected members")
        new = found[-1]
        for number in range(5):
            produce(new, "T", f"other-{number}")
        group.heal()
        wait_for(lambda: _converged(group, new), 30, "the old leader follows, logs equal")
        retry: httpx.Response | None = None
        for _ in range(5):  # leadership back to the member that remembers K
            leader = group.wait_leader()
            if leader is not old:
                handed = leader.client.post("/admin/dledger/transfer-leadership",
                                            json={"target_id": old.node_id}, timeout=30)
                # 503 NOT_LEADER: leadership moved between the two calls; ask the next one.
                assert handed.status_code in (200, 409, 503), handed.text
                continue
            retry = old.client.post("/v1/topics/T/messages", json={"body": "K-body"},
                                    headers={"idempotency-key": "K"})
            if retry.status_code != 503:  # 503: it lost leadership meanwhile
                break
        assert retry is not None, f"{old.node_id} never led again"
        assert retry.status_code == 201, retry.text
        stored = old.client.get(f"/v1/messages/{retry.json()['msg_id']}",
                                params={"body_encoding": "utf8"})
        assert stored.status_code == 200, (retry.text, stored.text)
        assert stored.json()["body"] == "K-body"
        bodies = [body for _, body in queue(old, "T")]
        assert bodies.count("K-body") == 1, bodies
        assert queue(old, "T")[retry.json()["queue_offset"]][1] == "K-body"
        for member in group.members.values():  # truncated with K: applied nowhere
            assert member.client.get("/v1/topics/Cut").status_code == 404, member.node_id
    finally:
        try:
            group.stop_all()
        finally:
            group.close_proxies()


def _start_alone(group: DLedgerGroup, member: Member, *extra: str) -> subprocess.Popen[bytes]:
    """`member` started with itself as the whole group (the wrong peer list of finding 5)."""
    arguments = group.arguments(member)
    alone = f"{member.node_id}-127.0.0.1:{member.dledger_port}"
    arguments[arguments.index(f"dledger_peers={group.peers}")] = f"dledger_peers={alone}"
    arguments[arguments.index(f"dledger_http_peers={group.http_peers}")] = (
        f"dledger_http_peers={member.node_id}-127.0.0.1:{member.http_port}")
    for setting in extra:
        arguments += ["--set", setting]
    env = {key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    with member.log_path.open("ab") as log:
        return subprocess.Popen(arguments, cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT,
                                pass_fds=(member.http_socket.fileno(),
                                          member.dledger_socket.fileno()))


def test_a_member_started_with_another_peer_list_is_refused(tmp_path: Path) -> None:
    """A member of a 3-member group restarted with itself alone as the peer list exits at
    once, naming the stored list and the given one, and never serves; restarted with the
    group's list it rejoins and holds what the group committed meanwhile."""
    group = DLedgerGroup(tmp_path, default_queue_count=1, **QUIET)
    try:
        group.start_all()
        leader = group.wait_leader()
        member = next(m for m in group.members.values() if m is not leader)
        produce(leader, "M", "first")
        wait_for(lambda: queue(member, "M") == [(0, "first")], 15, "replicated")
        assert group.stop(member.node_id) == 0
        alone = _start_alone(group, member)
        try:
            exit_code = alone.wait(30)
        except subprocess.TimeoutExpired:
            alone.kill()
            alone.wait()
            raise AssertionError(f"{member.node_id} started alone and ran:\n"
                                 f"{member.log()}") from None
        assert exit_code != 0
        log_text = member.log()
        assert f"peers {group.peers}" in log_text, log_text
        assert f"peers {member.node_id}-127.0.0.1:{member.dledger_port}" in log_text, log_text
        assert "dledger_membership_override" in log_text, log_text
        produce(leader, "M", "second")
        group.start(member.node_id)
        wait_for(lambda: queue(member, "M") == [(0, "first"), (1, "second")], 15,
                 "the rejoined member holds what the group committed")
    finally:
        group.stop_all()


# Seed 1 in `make test` (two leader kills between deletes before and after them); `make faults`
# runs seeds 1 to N with TWINLOG_DLEDGER_STATE_SEEDS=N.
SEEDS = range(1, 1 + int(os.environ.get("TWINLOG_DLEDGER_STATE_SEEDS", "1")))
STEPS = 36
KILLS_MAX = 2
QUEUES = 2


class Workload:
    """One client thread against a DLedger group, driven by a seed: produces, a group's offset
    commits, deletes and re-creates of the topic, and kill -9 of the leader (restarted once the
    others elected one). What each answer promised is recorded for the checks at the end."""

    def __init__(self, group: DLedgerGroup, seed: int) -> None:
        self.group = group
        self.rng = random.Random(seed)
        self.leader = group.wait_leader()
        self.incarnation = 0
        self.acked: dict[str, tuple[int, int]] = {}  # body -> (queue id, queue offset)
        self.maybe: set[str] = set()  # 202: may or may not be there
        self.sequence = 0
        self.kills = 0

    def run(self) -> None:
        for _ in range(STEPS):
            choice = self.rng.random()
            if choice < 0.6:
                for _ in range(self.rng.randint(1, 4)):
                    self.produce()
            elif choice < 0.8:
                self._commit()
            elif choice < 0.9:
                self._delete()
            elif self.kills < KILLS_MAX:
                self._kill_leader()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """To the leader; a 503 (not the leader, an election) finds the leader and retries."""
        for _ in range(20):
            try:
                response = self.leader.client.request(method, path, **kwargs)
            except httpx.HTTPError:
                response = None
            if response is not None and response.status_code != 503:
                return response
            self.leader = self.group.wait_leader()
        raise AssertionError(f"{method} {path}: no leader took it in 20 tries")

    def produce(self) -> None:
        self.sequence += 1
        body = f"i{self.incarnation}-m{self.sequence}"
        response = self._request("POST", f"/v1/topics/{TOPIC}/messages", json={"body": body})
        if response.status_code == 201:
            answer = response.json()
            self.acked[body] = (answer["queue_id"], answer["queue_offset"])
        else:
            assert response.status_code == 202, response.text
            self.maybe.add(body)

    def _commit(self) -> None:
        queue_id = self.rng.randrange(QUEUES)
        page = self._request("GET", f"/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                             params={"offset": 0, "max_messages": 1})
        if page.status_code == 404:
            return  # the topic is not there now
        assert page.status_code == 200, page.text
        offset = self.rng.randint(0, page.json()["max_offset"])
        response = self._request("PUT", f"/v1/groups/{GROUP}/offsets/{TOPIC}/queues/{queue_id}",
                                 json={"offset": offset})
        assert response.status_code in (200, 202, 400, 404, 409), response.text

    def _delete(self) -> None:
        """Until it is known applied: a 202 may or may not commit, so ask again (404: gone)."""
        for _ in range(10):
            response = self._request("DELETE", f"/v1/topics/{TOPIC}")
            if response.status_code in (204, 404):
                self.incarnation += 1
                return
            assert response.status_code == 202, response.text
        raise AssertionError("the delete never settled")

    def _kill_leader(self) -> None:
        killed = self.leader
        self.group.kill(killed.node_id)
        self.kills += 1
        self.leader = self.group.wait_new_leader(killed)
        self.group.start(killed.node_id)

    def current(self, body: str) -> bool:
        return body.startswith(f"i{self.incarnation}-")


TOPIC, GROUP = "S", "G"


def _messages(member: Member, queue_id: int) -> tuple[list[tuple[int, str]], int]:
    response = member.client.get(f"/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                                 params={"offset": 0, "max_messages": 500,
                                         "body_encoding": "utf8"})
    if response.status_code == 404:
        return [], 0
    assert response.status_code == 200, response.text
    page = response.json()
    return [(m["queue_offset"], m["body"]) for m in page["messages"]], page["max_offset"]


def _tables(member: Member) -> list[Any]:
    return [member.client.get(f"/admin/sync/{table}").json()["rows"]
            for table in ("topics", "subscription-groups", "consumer-offsets")]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_produces_commits_deletes_and_leader_kills_keep_every_promise(
        tmp_path: Path, seed: int) -> None:
    """For a seed, one client produces, commits a group's offsets, deletes and re-creates the
    topic, and kill -9s the leader. At the end, on the final leader: every 201 of the topic's
    current incarnation is at its queue offset, no message of a deleted incarnation is
    served, the group's offsets are within the queues; and every member's topic, group and
    offset tables are the same."""
    root = tmp_path / f"seed{seed}"
    root.mkdir()
    group = DLedgerGroup(root, default_queue_count=QUEUES, **QUIET)
    try:
        group.start_all()
        workload = Workload(group, seed)
        workload.run()
        leader = group.wait_leader()
        for member in group.members.values():
            wait_for(lambda m=member, lead=leader: _tables(m) == _tables(lead), 30,
                     f"seed {seed}: {member.node_id}'s tables equal the leader's")
        served: dict[int, dict[int, str]] = {}
        for queue_id in range(QUEUES):
            messages, _ = _messages(leader, queue_id)
            served[queue_id] = dict(messages)
            stale = [body for _, body in messages if not workload.current(body)]
            assert not stale, f"seed {seed}: deleted messages served: {stale}"
            unknown = [body for _, body in messages
                       if body not in workload.acked and body not in workload.maybe]
            assert not unknown, f"seed {seed}: messages nobody stored: {unknown}"
        for body, (queue_id, queue_offset) in workload.acked.items():
            if workload.current(body):
                assert served[queue_id].get(queue_offset) == body, (
                    f"seed {seed}: {body} acknowledged at {queue_id}/{queue_offset}, "
                    f"served {served[queue_id].get(queue_offset)}")
        offsets = leader.client.get(f"/v1/groups/{GROUP}/offsets")
        if offsets.status_code == 200:
            for offset in offsets.json()["offsets"]:
                _, max_offset = _messages(leader, offset["queue_id"])
                assert offset["offset"] <= max_offset, (seed, offset, max_offset)
    finally:
        group.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def _restart_with_override(group: DLedgerGroup, member: Member) -> None:
    """`member` started again with the group's peer list, over a data dir that holds another
    (`dledger_membership_override`)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    arguments = [*group.arguments(member), "--set", "dledger_membership_override=true"]
    with member.log_path.open("ab") as log:
        member.process = subprocess.Popen(arguments, cwd=ROOT, env=env, stdout=log,
                                          stderr=subprocess.STDOUT,
                                          pass_fds=(member.http_socket.fileno(),
                                                    member.dledger_socket.fileno()))


def test_a_member_that_led_alone_in_the_groups_term_serves_only_what_the_group_committed(
        tmp_path: Path) -> None:
    """Finding 5 with the override: the leader is killed, the others elect a leader of the
    next term; the killed member starts alone (override) and leads that same term alone,
    answering 201 to 20 messages of its own while the group's leader takes 20 others. Started
    again with the group's list (override), it must end with the group's queue, serve none
    of its own 20 at any point after it rejoined, and answer /readyz 200 once caught up."""
    group = DLedgerGroup(tmp_path, default_queue_count=1, **QUIET)
    alone: subprocess.Popen[bytes] | None = None
    try:
        group.start_all()
        first = group.wait_leader()
        for number in range(5):
            produce(first, "F", f"common-{number}")
        for member in group.members.values():
            wait_for(lambda m=member: len(queue(m, "F")) == 5, 15, "replicated")
        group.kill(first.node_id)
        leader = group.wait_new_leader(first)
        group_term = leader.dledger()["term"]
        alone = _start_alone(group, first, "dledger_membership_override=true")
        first.process = alone
        group.wait_ready(first)
        wait_for(lambda: first.dledger()["accepting_writes"], 15, "the lone member leads")
        assert first.dledger()["term"] == group_term, "not a fork of equal term"
        forked = {f"fork-{number}" for number in range(20)}
        for body in sorted(forked):
            produce(first, "F", body)
        expected = queue(leader, "F")
        for number in range(20):
            produce(leader, "F", f"group-{number}")
            expected.append((5 + number, f"group-{number}"))
        group.kill(first.node_id)
        _restart_with_override(group, first)
        served: set[str] = set()

        def caught_up() -> bool:
            try:
                held = queue(first, "F")
            except httpx.HTTPError:
                return False
            served.update(body for _, body in held if body in forked)
            return held == expected

        try:
            wait_for(caught_up, 30, f"{first.node_id} holds the group's queue")
        except AssertionError as error:
            views = {m.node_id: m.dledger() for m in group.live()}
            raise AssertionError(f"{error}: it holds {queue(first, 'F')}; {views}") from None
        assert not served, f"served messages the group never committed: {sorted(served)}"
        assert first.client.get("/readyz").status_code == 200
        produce(group.wait_leader(), "F", "after")
        wait_for(lambda: queue(first, "F") == [*expected, (25, "after")], 15,
                 "the rejoined member follows the group")
    finally:
        group.stop_all()


# Commit-log files of 64 KiB, any file older than a second removable (retention runs every
# 10 s, the store's default).
RETAINED = {"mapped_file_size_bytes": 64 * 1024, "message_size_max_bytes": 8 * 1024,
            "file_reserved_hours": 0.0003}
FILL_BODY = "f" * 2000


def _fill(leader: Member, first: int, count: int) -> None:
    for number in range(first, first + count):
        produce(leader, "Fill", f"{number}-{FILL_BODY}")


def wipe_a_follower_past_retention(group: DLedgerGroup) -> tuple[Member, Member]:
    """Topic Kept (2 queues) and group G's offset 1 on its queue 0 go in the first file; a
    follower is stopped and wiped once it caught up; 200 KB more go in, until retention
    removed the first files on the leader (its base moved). Returns the leader and the
    wiped member (stopped)."""
    group.start_all()
    leader = group.wait_leader()
    created = leader.client.post("/v1/topics", json={"name": "Kept", "read_queue_count": 2,
                                                     "write_queue_count": 2})
    assert created.status_code == 201, created.text
    for number in range(3):
        produce(leader, "Kept", f"kept-{number}", queue_id=0)
    committed = leader.client.put("/v1/groups/G/offsets/Kept/queues/0", json={"offset": 1})
    assert committed.status_code == 200, committed.text
    _fill(leader, 0, 70)  # past the first two files, on every member
    fresh = next(m for m in group.members.values() if m is not leader)
    wait_for(lambda: fresh.dledger()["committed_index"] == leader.dledger()["end_index"],
             15, "the follower caught up")
    assert group.stop(fresh.node_id) == 0
    shutil.rmtree(fresh.data_dir)
    _fill(leader, 70, 100)
    wait_for(lambda: leader.dledger()["base_index"] > 0, 40,
             f"retention removed the first files (leader: {leader.dledger()})")
    return leader, fresh


def test_an_empty_member_after_retention_takes_the_tables_and_applies_only_later_records(
        tmp_path: Path) -> None:
    """Topic Kept (2 queues) and group G's offset 1 on its queue 0 are records of the first
    commit-log file. A follower is stopped and its data dir wiped; 200 KB more go in, and
    retention removes the first files on the leader (its base moves). Started empty, the
    member is reset to the leader's base, takes the tables by the bootstrap pull (the
    records that made them are gone), holds the same tables as the leader, the same Fill
    queue from the base on, and applies the records that follow (a later commit)."""
    group = DLedgerGroup(tmp_path, default_queue_count=1, **QUIET, **RETAINED)
    try:
        leader, fresh = wipe_a_follower_past_retention(group)
        assert leader.dledger()["min_offset"] > 0
        group.start(fresh.node_id)
        wait_for(lambda: fresh.dledger()["committed_index"] == leader.dledger()["end_index"],
                 30, "the wiped member caught up")
        assert fresh.dledger()["base_index"] > 0  # reset to a base of its leader
        try:
            wait_for(lambda: _tables(fresh) == _tables(leader), 15, "equal tables")
        except AssertionError:
            export = leader.client.get("/admin/sync/topics").json()
            raise AssertionError(
                f"the wiped member's tables {_tables(fresh)} are not the leader's "
                f"{_tables(leader)}; its sync {fresh.dledger()['metadata_sync']}, the "
                f"leader's position {export['log_position']}, first retained metadata "
                f"record {export['metadata_min_queue_offset']}") from None
        assert queue(fresh, "Fill") == queue(leader, "Fill")
        again = leader.client.put("/v1/groups/G/offsets/Kept/queues/0", json={"offset": 2})
        assert again.status_code == 200, again.text
        wait_for(lambda: _tables(fresh) == _tables(leader), 15,
                 "the wiped member applies the records after its bootstrap")
        assert fresh.client.get("/readyz").status_code == 200
    finally:
        group.stop_all()

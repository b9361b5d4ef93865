"""An example for every operation of the spec: of its request when it takes input (body,
parameters), of its answer when it takes none. Generators show them; the contract test's fuzzer
sends the request examples first, so each is a request the broker accepts.
"""

from __future__ import annotations

from typing import Any

_TIMESTAMP_MS = 1_795_371_792_670

_PARAMETER_EXAMPLES: dict[str, Any] = {
    "topic": "Orders",
    "group": "billing",
    "queue_id": 0,
    "offset": 0,
    "max_messages": 32,
    "body_encoding": "utf8",
    "Idempotency-Key": "order-42-attempt-1",
    "X-Twinlog-Keys": "order-42,customer-7",
    "X-Twinlog-Tags": "paid",
    "X-Twinlog-Properties": '{"region": "eu"}',
    "key": "order-42",
    "begin_timestamp_ms": 0,
    "end_timestamp_ms": _TIMESTAMP_MS,
    "wait_ms": 0,
    "msg_id": "7F0000010000494D0000000000000228",
    "X-Twinlog-Delay-Level": 3,
    "X-Twinlog-Deliver-At-Ms": _TIMESTAMP_MS,
    "X-Twinlog-Delay-Ms": 10_000,
    "tags": "paid || refunded",
}
# A real handle (the default pop_handle_key): the broker answers it 409 STALE, not 400.
_HANDLE = "AQAAAAAAAAAAAAAAAAABAAAAAAAAAAEAB2JpbGxpbmcABk9yZGVyc-qXz9gg8Tn-"

_BODY_EXAMPLES: dict[str, Any] = {
    "produce-message": {"body": "order 42 paid", "keys": ["order-42"], "tags": "paid",
                        "properties": {"region": "eu"}},
    "produce-batch": {"messages": [
        {"body": "order 42 paid", "keys": ["order-42"], "idempotency_key": "order-42-paid"},
        {"body": "b3JkZXIgNDM=", "body_encoding": "base64", "queue_id": 1}]},
    "create-topic": {"name": "Orders", "read_queue_count": 4, "write_queue_count": 4},
    "create-topics": {"topics": [{"name": "Orders"}, {"name": "Refunds", "permission": 6}]},
    "create-group": {"name": "billing", "retry_times_max": 16},
    "update-group": {"backoff": {"policy": "exponential", "initial_ms": 5_000,
                                 "multiplier": 2.0, "max_ms": 600_000}},
    "commit-consumer-offset": {"offset": 0},
    "update-topic": {"write_queue_count": 8, "read_queue_count": 8},
    "reset-consumer-offsets": {"timestamp_ms": _TIMESTAMP_MS},
    "admin-ha-promote": {"role": "SYNC_MASTER", "force": False},
    "admin-ha-demote": {"master_ha_address": "10.0.0.2:10912",
                        "master_http_address": "http://10.0.0.2:8080"},
    "admin-dledger-transfer-leadership": {"target_id": "n1"},
    "receive-messages": {"max_messages": 32, "invisible_ms": 30_000, "wait_ms": 0,
                         "tags": "paid", "body_encoding": "utf8"},
    "ack-messages": {"receipt_handles": [_HANDLE]},
    "change-invisibility": {"receipt_handle": _HANDLE, "invisible_ms": 60_000},
}

_TOPIC = {"name": "Orders", "read_queue_count": 4, "write_queue_count": 4, "permission": 6,
          "readable": True, "writable": True, "created_at_ms": _TIMESTAMP_MS,
          "updated_at_ms": _TIMESTAMP_MS}
_DATA_VERSION = {"counter": 3, "timestamp_ms": _TIMESTAMP_MS}

_ANSWER_EXAMPLES: dict[str, Any] = {
    "healthz": {"status": "ok"},
    "readyz": {"ready": True, "role": "ASYNC_MASTER", "state": "RUNNING", "ha_link": None,
               "detail": None},
    "metrics": 'twinlog_puts_total{status="PUT_OK"} 7.0\n',
    "list-topics": {"topics": [_TOPIC]},
    "list-groups": {"groups": [{"name": "billing", "consume_enabled": True,
                                "broadcast_enabled": False, "retry_queue_count": 1,
                                "retry_times_max": 16, "backoff": None, "fifo": False,
                                "created_at_ms": _TIMESTAMP_MS,
                                "updated_at_ms": _TIMESTAMP_MS}]},
    "admin-diff": {"role": "SYNC_MASTER", "master": {
        "master_max_offset": 668, "epoch": 2, "max_diff_bytes": 0, "in_sync_slave_count": 0,
        "slaves_needed": 1, "slaves": []}, "slave": None},
    "admin-ha": {"role": "ASYNC_MASTER", "master": {
        "listen_address": "127.0.0.1:10912", "epoch": 2, "authenticated": True,
        "connection_count": 0, "master_max_offset": 668, "in_sync_slave_count": 0,
        "slaves_needed": 1, "slaves": [], "rejected": []}, "slave": None},
    "admin-dledger": {
        "self_id": "n0", "group": "default", "role": "LEADER", "accepting_writes": True,
        "term": 1, "leader_id": "n0",
        "leader_http_address": "http://127.0.0.1:8080",
        "leader_dledger_address": "127.0.0.1:20911", "committed_index": 2, "end_index": 2,
        "base_index": 0, "min_offset": 0, "retention_blocked_offset": None,
        "committed_offset": 97, "max_offset": 97, "pending_appends": 0,
        "inbox_dropped_count": 0, "elections_started_count": 1, "last_error": None,
        "diverged": None, "forks_cut_count": 0, "metadata_sync": None, "peers": [
            {"peer_id": "n1", "dledger_address": "127.0.0.1:20912",
             "http_address": "http://127.0.0.1:8081", "match_index": 2, "lag_entries": 0,
             "lag_bytes": 0, "inflight_pushes": 0, "dispatcher_state": "COMMIT",
             "last_contact_ms_ago": 4}]},
    "admin-broker": {"role": "ASYNC_MASTER", "flush_disk_type": "ASYNC_FLUSH",
                     "versions": {"twinlog": "0.1.0"},
                     "metadata_schema_revision": "f80ccc51dad8",
                     "data_versions": {"topic_config": _DATA_VERSION},
                     "settings": {"max_batch_messages": 1000}},
    "admin-store": {"min_offset": 0, "max_offset": 668, "flushed_offset": 668,
                    "dispatch_behind_bytes": 0, "dispatch_failed_queues": [],
                    "consume_queue_open_files": 7, "commit_log_files": [
                        {"name": "00000000000000000000", "start_offset": 0,
                         "write_offset": 668, "size_bytes": 1073741824}],
                    "consume_queue_count": 7, "topic_count": 3, "disk_used_bytes": 6004736,
                    "disk_used_ratio": 0.75, "put_counts": {"PUT_OK": 7},
                    "put_bytes_total": 668, "put_messages_per_s": 0.09,
                    "put_bytes_per_s": 10.9},
    "admin-sync-topics": {"table": "topic_config", "data_version": _DATA_VERSION, "rows": [
        {"name": "Orders", "read_queue_count": 4, "write_queue_count": 4, "permission": 6,
         "created_at_ms": _TIMESTAMP_MS, "updated_at_ms": _TIMESTAMP_MS}]},
    "admin-sync-subscription-groups": {
        "table": "subscription_group", "data_version": _DATA_VERSION, "rows": [
            {"name": "billing", "consume_enabled": True, "broadcast_enabled": False,
             "retry_queue_count": 1, "retry_times_max": 16, "backoff": "", "fifo": False,
             "created_at_ms": _TIMESTAMP_MS, "updated_at_ms": _TIMESTAMP_MS}]},
    "admin-sync-consumer-offsets": {
        "table": "consumer_offset", "data_version": _DATA_VERSION, "rows": [
            {"group_name": "billing", "topic": "Orders", "queue_id": 0, "queue_offset": 0,
             "updated_at_ms": _TIMESTAMP_MS}]},
    "admin-timers": {
        "scheduler_active": True, "pending_total": 2, "pending_levels": 1, "pending_timers": 1,
        "oldest_due_ms": _TIMESTAMP_MS + 10_000, "delivered_total": 7, "rolled_total": 3,
        "dropped_totals": {"cancelled": 1, "topic_missing": 0, "origin_gone": 0},
        "cancels_pending": 0, "write_refusals_total": 0,
        "lateness": {"count": 7, "p50_ms_at_most": 50, "p99_ms_at_most": 100, "max_ms": 61},
        "lanes": [{"lane": "S:2", "kind": "level", "delay_level": 3, "wait_ms": 10_000,
                   "pending": 1, "next_queue_offset": 4, "oldest_due_ms": _TIMESTAMP_MS + 10_000},
                  {"lane": "T:6", "kind": "timer", "delay_level": None, "wait_ms": 6_400,
                   "pending": 1, "next_queue_offset": 2,
                   "oldest_due_ms": _TIMESTAMP_MS + 20_000}]},
    "admin-sync-delay-offsets": {"table": "delay_offset",
                                 "data_version": {"counter": 0, "timestamp_ms": 0}, "rows": []},
    "admin-create-snapshot": {
        "snapshot_id": "00000000000000000000-00000000000000000668", "path": "snapshots/...",
        "broker_name": "twinlog", "broker_role": "ASYNC_MASTER", "range_from": 0,
        "range_to": 668, "message_count": 7, "body_bytes": 35, "include_bodies": True,
        "topics": {"Orders": 7}, "metadata_rows": {"topic_config": 1},
        "replication_samples": 0, "created_ms": _TIMESTAMP_MS, "schema_version": 1,
        "skipped_before_bytes": 0},
}


def add_examples(document: dict[str, Any]) -> None:
    """Give every operation its example (parameters and body, or its answer)."""
    for item in document["paths"].values():
        for operation in item.values():
            operation_id = operation["operationId"]
            for parameter in operation.get("parameters", []):
                parameter["example"] = _PARAMETER_EXAMPLES[parameter["name"]]
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and operation_id in _BODY_EXAMPLES:
                body["example"] = _BODY_EXAMPLES[operation_id]
            answer = _ANSWER_EXAMPLES.get(operation_id)
            if answer is not None:
                _answer_content(operation)["example"] = answer


def _answer_content(operation: dict[str, Any]) -> dict[str, Any]:
    responses = operation["responses"]
    success = next(code for code in sorted(responses) if code.startswith("2"))
    content: dict[str, Any] = responses[success]["content"]
    return next(iter(content.values()))

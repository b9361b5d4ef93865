"""/metrics for dashboards: consumer lag per group and topic, messages per topic, consume
latency and delivery delay, process figures and build info, with bounded label sets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import app.api.metrics_usage as metrics_usage
from tests.support.app import Served, ServeFactory
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[3]


async def _samples(served: Served) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await served.client.get("/metrics")
    assert response.status_code == 200
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples}


async def _produce(served: Served, topic: str, queue_id: int, count: int) -> None:
    for index in range(count):
        response = await served.client.post(f"/v1/topics/{topic}/messages",
                                            json={"body": f"m{index}", "queue_id": queue_id})
        assert response.status_code == 201, response.text
    wait_dispatched(served.broker.store)


async def test_lag_messages_and_consume_figures(serve: ServeFactory) -> None:
    """Lag per group and topic counts every queue of the topic (a queue without a commit from
    its min offset), as the lag endpoint does; consume requests count their messages, latency
    and per-message delivery delay."""
    async with serve() as served:
        await _produce(served, "Lagged", 0, 5)
        await _produce(served, "Lagged", 1, 2)
        commit = await served.client.put("/v1/groups/g1/offsets/Lagged/queues/0",
                                         json={"offset": 2})
        assert commit.status_code == 200, commit.text
        read = await served.client.get("/v1/topics/Lagged/queues/0/messages",
                                       params={"offset": 0, "max_messages": 3})
        assert len(read.json()["messages"]) == 3
        samples = await _samples(served)
        lag_report = (await served.client.get("/v1/groups/g1/lag")).json()
        labels = (("group", "g1"), ("topic", "Lagged"))
        assert samples[("twinlog_consumer_lag_messages", labels)] == 5 == lag_report["total_lag"]
        assert samples[("twinlog_consumer_offset_total", labels)] == 2
        assert samples[("twinlog_topic_messages_total", (("topic", "Lagged"),))] == 7
        assert samples[("twinlog_topic_consumed_messages_total", (("topic", "Lagged"),))] == 3
        assert samples[("twinlog_consume_latency_seconds_count", ())] == 1
        assert samples[("twinlog_consume_delivery_delay_seconds_count", ())] == 3
        assert samples[("twinlog_metrics_series_dropped", ())] == 0


async def test_process_and_build_info(serve: ServeFactory) -> None:
    """Process CPU and memory, python_info, and the build's version are exported."""
    async with serve() as served:
        samples = await _samples(served)
    names = {name for name, _ in samples}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes",
            "process_open_fds", "python_info"} <= names
    (build,) = [labels for name, labels in samples if name == "twinlog_build_info"]
    assert dict(build)["version"] == metrics_usage.build_version()


async def test_label_sets_are_bounded(serve: ServeFactory,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SERIES_MAX topics, the rest are left out of the per-topic families and counted."""
    monkeypatch.setattr(metrics_usage, "SERIES_MAX", 2)
    async with serve() as served:
        for topic in ("TopicA", "TopicB", "TopicC"):
            await _produce(served, topic, 0, 1)
        samples = await _samples(served)
    topics = {dict(labels)["topic"] for name, labels in samples
              if name == "twinlog_topic_messages_total"}
    assert topics == {"TopicA", "TopicB"}
    assert samples[("twinlog_metrics_series_dropped", ())] == 1


async def test_the_grafana_dashboard_uses_only_exported_metrics(serve: ServeFactory) -> None:
    """Every metric the shipped Grafana dashboard queries is one the broker exports (a renamed
    metric fails here, not on an operator's empty panel)."""
    dashboard = json.loads((ROOT / "docs" / "grafana" / "twinlog-dashboard.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\b(?:twinlog|process)_[a-z_]+", target["expr"])}
    assert queried
    async with serve() as served:
        response = await served.client.get("/metrics")
    exported: set[str] = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    for family in text_string_to_metric_families(response.text):
        exported.add(family.name)
        exported.update(family.name + suffix for suffix in suffixes.get(family.type, ()))
        exported.update(sample.name for sample in family.samples)
    assert queried - exported == set()

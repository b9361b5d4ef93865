"""`twinlog serve` over HTTPS with a certificate made in the test: produce and consume, and a
slave's metadata sync that verifies the master's certificate (and fails on a wrong CA)."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import httpx
import pytest

from tests.support.brokers import BrokerProcess, Launcher, wait_for
from tests.support.certificates import ServerCertificate, make_ca, make_server_certificate

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificate:
    return make_server_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def master(launch: Launcher, certificate: ServerCertificate) -> BrokerProcess:
    return launch("tls-master", "ASYNC_MASTER", tls_ca=certificate.ca_cert,
                  tls_cert=certificate.cert, tls_key=certificate.key)


def test_produce_and_consume_over_https(master: BrokerProcess) -> None:
    """A message produced over HTTPS (the client verifying the broker's certificate against
    the test CA) is consumed back over HTTPS."""
    assert master.url.startswith("https://")
    put = master.client.post("/v1/topics/Secure/messages",
                             json={"body": "over tls", "queue_id": 0})
    assert put.status_code == 201, put.text

    def bodies() -> list[bytes]:  # a 201 is stored; the consume queue follows by dispatch
        page = master.get_json("/v1/topics/Secure/queues/0/messages", offset=0)
        return [base64.b64decode(m["body"]) for m in page["messages"]]

    wait_for(lambda: bodies() == [b"over tls"], what="the message readable over https")


def test_plain_http_and_unverified_clients_get_nothing(master: BrokerProcess,
                                                       tmp_path: Path) -> None:
    """Plain HTTP to the HTTPS port gets no answer, and a client trusting another CA refuses
    the broker's certificate."""
    with pytest.raises(httpx.HTTPError):
        httpx.get(master.url.replace("https://", "http://") + "/healthz", timeout=5)
    other_ca, _ = make_ca(tmp_path, "other-ca")
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(master.url + "/healthz", timeout=5,
                  verify=ssl.create_default_context(cafile=str(other_ca)))


def test_slave_syncs_metadata_from_an_https_master(launch: Launcher, master: BrokerProcess,
                                                   certificate: ServerCertificate) -> None:
    """A slave whose master_ca_file is the test CA pulls the master's topics over HTTPS."""
    created = master.client.post("/v1/topics", json={"name": "SyncedOverTls"})
    assert created.status_code == 201, created.text
    slave = launch("tls-slave", "SLAVE", master=master, master_ca_file=certificate.ca_cert)

    def synced() -> bool:
        return any(topic["name"] == "SyncedOverTls"
                   for topic in slave.get_json("/v1/topics")["topics"])

    wait_for(synced, 20, "the topic synced over https")


def test_slave_with_a_wrong_ca_fails_the_sync_clearly(launch: Launcher, master: BrokerProcess,
                                                      tmp_path: Path) -> None:
    """A slave trusting another CA does not sync, and /admin/diff names the certificate
    failure."""
    wrong_ca, _ = make_ca(tmp_path, "wrong-ca")
    slave = launch("tls-wrong-ca", "SLAVE", master=master, master_ca_file=wrong_ca)

    def failed() -> bool:
        sync = slave.get_json("/admin/diff")["slave"]["metadata_sync"]
        return int(sync["consecutive_failures"]) >= 1

    wait_for(failed, 20, "a failed sync")
    sync = slave.get_json("/admin/diff")["slave"]["metadata_sync"]
    assert "CERTIFICATE_VERIFY_FAILED" in sync["last_error"]
    assert sync["sync_count"] == 0

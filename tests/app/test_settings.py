"""Settings: flags over environment over TOML over defaults; bad values name the setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.cli.main import _serve_overrides, build_parser
from app.settings import Scope, SettingsError, load_settings
from store import BrokerRole


def test_precedence_flags_env_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value passed in code beats TWINLOG_* env, which beats the TOML file."""
    config = tmp_path / "twinlog.toml"
    config.write_text('http_port = 9000\nha_listen_port = 9001\nslave_timeout_ms = 1500\n'
                      'broker_role = "SYNC_MASTER"\n')
    monkeypatch.setenv("TWINLOG_HA_LISTEN_PORT", "9002")
    monkeypatch.setenv("TWINLOG_AUTH_TOKENS", '{"secret": ["produce", "admin"]}')
    settings = load_settings(config, http_port=9100)
    assert settings.http_port == 9100
    assert settings.ha_listen_port == 9002
    assert settings.slave_timeout_ms == 1500
    assert settings.broker_role is BrokerRole.SYNC_MASTER
    assert [scope.value for scope in settings.auth_tokens["secret"]] == ["produce", "admin"]


def test_config_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TWINLOG_CONFIG_FILE names the TOML file when no file is passed."""
    config = tmp_path / "twinlog.toml"
    config.write_text("default_queue_count = 8\n")
    monkeypatch.setenv("TWINLOG_CONFIG_FILE", str(config))
    assert load_settings().default_queue_count == 8


@pytest.mark.parametrize(("overrides", "named"), [
    ({"broker_role": "SLAVE", "master_http_address": "http://m:1"}, "ha_master_address"),
    ({"broker_role": "SLAVE", "ha_master_address": "m:1"}, "master_http_address"),
    ({"master_http_address": "m:1"}, "master_http_address"),
    ({"mapped_file_size_bytes": 1000}, "mapped_file_size_bytes"),
    ({"max_body_size_bytes": 2048, "message_size_max_bytes": 4096}, "max_body_size_bytes"),
    ({"http_port": 7000, "ha_listen_port": 7000}, "ha_listen_port"),
    ({"in_sync_replicas": 1}, "in_sync_replicas"),
    ({"auth_tokens": {"t": []}}, "auth_tokens"),
    ({"auth_tokens": {"t": ["everything"]}}, "auth_tokens"),
    ({"http_port": 70000}, "http_port"),
    ({"slave_timeout_ms": 0}, "slave_timeout_ms"),
    ({"tls_cert": "server.crt"}, "tls_key"),
    ({"tls_key": "server.key"}, "tls_key"),
    ({"http_header_bytes_max": 10}, "http_header_bytes_max"),
])
def test_bad_settings_name_the_setting(overrides: dict[str, Any], named: str) -> None:
    """Each bad value or combination fails at load, and the message starts with its name."""
    with pytest.raises(SettingsError) as raised:
        load_settings(**overrides)
    assert str(raised.value).startswith(named), str(raised.value)


def test_unknown_setting_in_toml_is_refused(tmp_path: Path) -> None:
    """A typo in the TOML file fails instead of being ignored."""
    config = tmp_path / "twinlog.toml"
    config.write_text("slave_timeout = 5\n")
    with pytest.raises(SettingsError, match="slave_timeout"):
        load_settings(config)


def test_missing_config_file(tmp_path: Path) -> None:
    """A config file that does not exist is an error, not silently skipped."""
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(tmp_path / "absent.toml")


def test_public_view_hides_secrets() -> None:
    """/admin/broker's settings show no token, secret or database URL."""
    settings = load_settings(auth_tokens={"s3cret": ["admin"]}, ha_secret="also-s3cret",
                             database_url="postgresql://user:pw@db/twinlog")
    text = str(settings.public_view())
    assert "s3cret" not in text and "pw@" not in text
    assert settings.public_view()["auth"] == "1 token(s)"


def test_derived_store_and_ha_configs(tmp_path: Path) -> None:
    """The store and HA configs take the settings' values; the database sits in the data dir."""
    settings = load_settings(data_dir=tmp_path, broker_role="SYNC_MASTER", http_port=8088,
                             slave_timeout_ms=1234)
    assert settings.to_store_config().store_host == ("127.0.0.1", 8088)
    assert settings.to_ha_config().slave_timeout_ms == 1234
    assert settings.metadata_database_url == f"sqlite:///{tmp_path}/metadata.sqlite3"


def test_tls_from_toml_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tls_cert and tls_key come from the TOML file or TWINLOG_TLS_* like any setting, and
    master_ca_file from either."""
    config = tmp_path / "twinlog.toml"
    config.write_text('tls_cert = "/etc/twinlog/server.crt"\nmaster_ca_file = "/etc/ca.pem"\n')
    monkeypatch.setenv("TWINLOG_TLS_KEY", "/etc/twinlog/server.key")
    settings = load_settings(config)
    assert settings.tls_cert == Path("/etc/twinlog/server.crt")
    assert settings.tls_key == Path("/etc/twinlog/server.key")
    assert settings.master_ca_file == Path("/etc/ca.pem")


def test_structured_settings_from_the_cli_and_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--set auth_tokens=...` and TWINLOG_AUTH_TOKENS take JSON (a scope alone or a list) or
    the compact token:scope+scope form; cors_allow_origins takes JSON or a comma list."""
    parser = build_parser()
    arguments = parser.parse_args(["serve", "--set", 'auth_tokens={"t1": "admin"}',
                                   "--set", "cors_allow_origins=https://dash.example:3000"])
    settings = load_settings(**_serve_overrides(arguments))
    assert settings.auth_tokens == {"t1": [Scope.ADMIN]}
    assert settings.cors_allow_origins == ["https://dash.example:3000"]
    monkeypatch.setenv("TWINLOG_AUTH_TOKENS", "t1:admin,dash:monitor,a:b:produce+consume")
    monkeypatch.setenv("TWINLOG_CORS_ALLOW_ORIGINS", '["http://localhost:5173", "*"]')
    settings = load_settings()
    assert settings.auth_tokens == {"t1": [Scope.ADMIN], "dash": [Scope.MONITOR],
                                    "a:b": [Scope.PRODUCE, Scope.CONSUME]}
    assert settings.cors_allow_origins == ["http://localhost:5173", "*"]


@pytest.mark.parametrize(("name", "text"), [
    ("auth_tokens", "{not json"), ("auth_tokens", "t1"), ("auth_tokens", "t1:everything"),
    ("cors_allow_origins", "dash.example"), ("cors_allow_origins", "https://a/path")])
def test_bad_structured_text_names_the_setting(name: str, text: str) -> None:
    """Structured text that does not parse, or parses to a bad value, names its setting."""
    with pytest.raises(SettingsError, match=name):
        load_settings(**{name: text})


DLEDGER_PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
DLEDGER_HTTP_PEERS = "n0-127.0.0.1:8080;n1-127.0.0.1:8081;n2-127.0.0.1:8082"


def test_dledger_settings_from_toml_env_and_flags(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """DLedger mode is configured like every other setting: TOML, TWINLOG_* and flags; its
    times become the host's config and the peers keep DLedger's string format."""
    config = tmp_path / "twinlog.toml"
    config.write_text(f'replication_mode = "dledger"\ndledger_peers = "{DLEDGER_PEERS}"\n'
                      f'dledger_http_peers = "{DLEDGER_HTTP_PEERS}"\n'
                      'dledger_quorum_deadline_ms = 900\n')
    monkeypatch.setenv("TWINLOG_DLEDGER_SELF_ID", "n1")
    monkeypatch.setenv("TWINLOG_DLEDGER_SECRET", "group-secret")
    arguments = build_parser().parse_args(["serve", "--set", "dledger_election_timeout_ms=800"])
    settings = load_settings(config, **_serve_overrides(arguments))
    assert [peer.port for peer in settings.dledger_peer_list] == [20911, 20912, 20913]
    assert settings.dledger_http_urls()["n2"] == "http://127.0.0.1:8082"
    host = settings.to_dledger_host_config()
    assert (host.quorum_deadline_ms, host.election_timeout_ms) == (900, 800)
    assert (host.sync_before_ack, host.sync_interval_ms) == (False, 500)  # ASYNC_FLUSH
    flushed = load_settings(config, flush_disk_type="SYNC_FLUSH", flush_interval_ms=40,
                            **_serve_overrides(arguments)).to_dledger_host_config()
    assert (flushed.sync_before_ack, flushed.sync_interval_ms) == (True, 40)
    transport = settings.to_dledger_transport_config()
    assert (transport.self_id, transport.secret) == ("n1", b"group-secret")
    assert "dledger_secret" not in settings.public_view()


@pytest.mark.parametrize(("overrides", "named"), [
    ({}, "dledger_self_id"),
    ({"dledger_self_id": "n7"}, "dledger_self_id"),
    ({"dledger_self_id": "n0", "dledger_peers": "n0-h:1;n0-h:2"}, "dledger_peers"),
    ({"dledger_self_id": "n0", "dledger_http_peers": "n0-h:1;n2-h:2;n1-h:3"},
     "dledger_http_peers"),
    ({"dledger_self_id": "n0", "broker_role": "SLAVE", "master_http_address": "http://m:1",
      "ha_master_address": "m:1"}, "broker_role"),
    ({"dledger_self_id": "n0", "dledger_heartbeat_interval_ms": 700}, "heartbeat_interval_ms"),
])
def test_bad_dledger_settings_name_the_setting(overrides: dict[str, Any], named: str) -> None:
    """A DLedger member without its id, with peers that do not parse or do not match, as a
    SLAVE, or with times the host refuses, fails naming the setting."""
    settings: dict[str, Any] = {"replication_mode": "dledger", "dledger_peers": DLEDGER_PEERS,
                                "dledger_http_peers": DLEDGER_HTTP_PEERS, **overrides}
    with pytest.raises(SettingsError, match=named):
        load_settings(**settings)

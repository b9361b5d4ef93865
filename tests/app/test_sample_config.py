"""twinlog.toml, the commented sample at the repository root, is a working settings file."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings, load_settings

SAMPLE = Path(__file__).resolve().parents[2] / "twinlog.toml"
_COMMENTED_ASSIGNMENT = re.compile(r"^#\s*(?P<assignment>[a-z_]+\s*=\s*\S.*)$")


@pytest.fixture(autouse=True)
def _no_twinlog_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in os.environ:
        if name.startswith("TWINLOG_"):
            monkeypatch.delenv(name)


def _commented_out_settings() -> dict[str, Any]:
    """The `# name = value` lines: values the sample shows but does not set."""
    lines = [match.group("assignment")
             for line in SAMPLE.read_text(encoding="utf-8").splitlines()
             if (match := _COMMENTED_ASSIGNMENT.match(line.strip()))]
    return tomllib.loads("\n".join(lines))


def test_sample_loads_through_the_settings_loader() -> None:
    """The broker's own loader reads the sample, and every value in it is the one loaded."""
    written = tomllib.loads(SAMPLE.read_text(encoding="utf-8"))
    settings = load_settings(SAMPLE)
    loaded = settings.model_dump(mode="json")
    for name, value in written.items():
        assert loaded[name] == value, name
    settings.to_ha_config().check_authentication()  # what `twinlog serve` checks at start


def test_every_key_is_a_setting_commented_or_not() -> None:
    """Each key the sample sets or shows in a comment is a field of Settings."""
    written = tomllib.loads(SAMPLE.read_text(encoding="utf-8"))
    commented = _commented_out_settings()
    assert {"ha_master_address", "master_http_address", "database_url"} <= set(commented)
    assert set(written) | set(commented) <= set(Settings.model_fields)


def test_commented_slave_block_makes_a_valid_slave(tmp_path: Path) -> None:
    """The sample with its slave lines uncommented and broker_role SLAVE loads as a slave."""
    commented = _commented_out_settings()
    slave_keys = ("ha_master_address", "master_http_address", "master_auth_token")
    settings = load_settings(SAMPLE, broker_role="SLAVE",
                             **{key: commented[key] for key in slave_keys})
    assert settings.to_ha_config().master_host_port == ("10.0.0.1", 10912)

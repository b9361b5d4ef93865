"""docs/settings.md: generated from the settings model, complete, and checked for drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.cli import settings_doc
from app.cli.main import SERVE_FLAGS
from app.cli.main import main as cli_main
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = ROOT / "docs" / "settings.md"


class _Sample(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SAMPLE_")

    first_s: float = Field(1.5, gt=0, description="before any section")
    # -- network -------------------------------------------------------------------------------
    buffer_size_bytes: int = Field(2 << 20, ge=4096, description="a buffer")
    peer: str | None = Field(None, description="an optional peer")
    lag_bytes_max: int = Field(1 << 20, description="a bound named after its unit")


class _Undescribed(BaseSettings):
    timeout_ms: int = 5


def _row_of(text: str, name: str) -> str:
    rows = [line for line in text.splitlines() if line.startswith(f"| `{name}`")]
    assert len(rows) == 1, f"{name}: {len(rows)} rows"
    return rows[0]


def test_reference_matches_the_model() -> None:
    """docs/settings.md is exactly what the generator makes of app/settings.py."""
    assert REFERENCE.read_text(encoding="utf-8") == settings_doc.render(Settings, SERVE_FLAGS), (
        f"docs/settings.md is stale: run `{settings_doc.REGENERATE_COMMAND}` "
        "(PYTHONPATH=. python -m app.cli.main settings-doc) and commit the result")


def test_every_setting_has_one_row_with_env_var_and_description() -> None:
    """Each field of Settings appears once, with its TWINLOG_* variable and its description."""
    text = REFERENCE.read_text(encoding="utf-8")
    for name, field in Settings.model_fields.items():
        row = _row_of(text, name)
        assert f"`TWINLOG_{name.upper()}`" in row
        assert field.description and field.description.replace("|", "\\|") in row


def test_rows_carry_group_unit_default_and_bounds() -> None:
    """Section comments group the rows; suffixes give units; sizes and bounds are shown."""
    text = settings_doc.render(_Sample, {"peer_flag": "peer"})
    assert text.index("## General") < text.index("`first_s`") < text.index("## Network")
    assert text.index("## Network") < text.index("`buffer_size_bytes`")
    assert "| `first_s` | `SAMPLE_FIRST_S` | number, > 0 | `1.5` | seconds |" in text
    assert ("| `buffer_size_bytes` | `SAMPLE_BUFFER_SIZE_BYTES` | integer, >= 4096 | "
            "`2097152` (2 MiB) | bytes |") in text
    assert "| `peer`<br>`--peer-flag` | `SAMPLE_PEER` | string, optional | unset |" in text
    assert ("| `lag_bytes_max` | `SAMPLE_LAG_BYTES_MAX` | integer | `1048576` (1 MiB) | "
            "bytes |") in text


def test_a_setting_without_description_stops_the_generator() -> None:
    """An undescribed field is refused, naming it, rather than documented as blank."""
    with pytest.raises(settings_doc.SettingsDocError, match="timeout_ms: has no description"):
        settings_doc.render(_Undescribed)


def test_check_command_reports_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`twinlog settings-doc --check` passes on a fresh file, fails on a changed one naming
    the command that regenerates it."""
    target = tmp_path / "settings.md"
    assert cli_main(["settings-doc", "--output", str(target)]) == 0
    assert cli_main(["settings-doc", "--output", str(target), "--check"]) == 0
    target.write_text(target.read_text().replace("`8080`", "`8081`"))
    assert cli_main(["settings-doc", "--output", str(target), "--check"]) == 1
    assert "run `twinlog settings-doc`" in capsys.readouterr().err

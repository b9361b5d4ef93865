"""The small types and text forms the settings share: units, ports, token scopes, the
replication mode, and structured settings given as text."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10

Port = Annotated[int, Field(ge=0, le=65535)]


class Scope(enum.StrEnum):
    """What a bearer token may do."""

    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"
    # Read-only: the GET admin endpoints and /metrics, for dashboards (an admin token also may).
    MONITOR = "monitor"


def structured_text(text: str, name: str, compact: Callable[[str], Any]) -> Any:
    """A structured setting given as text (`--set`, environment): JSON when it starts like
    JSON, otherwise the setting's compact form."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}: not valid JSON ({error})") from None
    return compact(stripped)


def split_text(text: str, separators: str) -> list[str]:
    for separator in separators[1:]:
        text = text.replace(separator, separators[0])
    return [part.strip() for part in text.split(separators[0]) if part.strip()]


def compact_tokens(text: str) -> dict[str, list[str]]:
    """token:scope+scope,token:scope (a token may hold ':' but not ',')."""
    tokens: dict[str, list[str]] = {}
    for entry in split_text(text, ","):
        token, separator, scopes = entry.rpartition(":")
        if not separator or not token:
            raise ValueError(f"auth_tokens: expected token:scope+scope, got {entry!r}")
        tokens[token] = split_text(scopes, "+")
    return tokens




class ReplicationMode(enum.StrEnum):
    """How a broker replicates: classic master/slave (ha/), or a DLedger group (ha/dledger/)."""

    CLASSIC = "classic"
    DLEDGER = "dledger"


class SettingsError(ValueError):
    """Settings that cannot be used; the message names the setting."""


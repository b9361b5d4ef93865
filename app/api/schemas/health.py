"""Health and readiness answers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from app.api.schemas.ha import SlaveDiffView


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    ready: bool
    role: str
    state: str
    ha_link: SlaveDiffView | None = None
    detail: str | None = None

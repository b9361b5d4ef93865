"""RFC 9457 problem+json bodies, as every error answer carries them."""

from __future__ import annotations

from pydantic import BaseModel, Field

from store import PutMessageStatus


class ValidationProblem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details, with twinlog's extension members."""

    type: str
    title: str
    status: int
    detail: str
    error_code: str
    instance: str | None = None
    put_status: PutMessageStatus | None = None
    errors: list[ValidationProblem] | None = None
    master_http_address: str | None = None
    master_ha_address: str | None = None
    setting: str | None = Field(None, description="The broker setting whose bound was reached "
                                                  "(TOPICS_MAX_REACHED, ...)")

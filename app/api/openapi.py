"""The OpenAPI document: FastAPI's, with every error answer as problem+json.

Routes declare their error codes with `problem_responses(...)`; each code's description lists
the error codes of the one mapping table (app/api/errors.py) that answer with it. FastAPI's default
422 answers are replaced by 400 (twinlog answers schema violations with 400 VALIDATION_FAILED).
`openapi/openapi.json` is this document, written by `twinlog openapi`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.errors import PROBLEM_CONTENT_TYPE, PROBLEMS
from app.api.openapi_clients import shape_for_clients
from app.api.openapi_examples import add_examples
from app.api.schemas.problems import Problem
from app.api.schemas.produce import RESERVED_PROPERTY_NAMES, MessageAttributes
from app.settings import Settings
from store.timers.lanes import parse_delay_levels

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
DESCRIPTION = """\
twinlog's HTTP gateway: produce, consume and admin for a RocketMQ-style replicated broker.

* Errors are `application/problem+json` (RFC 9457) with an `error_code`, and `put_status`
  (the broker's PutMessageStatus) when a put was refused.
* Offsets are JSON integers; the broker never hands out one at or above 2^53.
* Auth: bearer tokens with scopes `produce`, `consume`, `admin`, `monitor` when the broker
  has tokens configured. `monitor` reads (/metrics, every GET under /admin); `admin` also
  changes the broker. `/healthz`, `/readyz` never need one.
"""


def _description(http_status: int) -> str:
    codes = sorted(code for code, kind in PROBLEMS.items() if kind.http_status == http_status)
    return "Error codes: " + ", ".join(codes) + "."


def problem_responses(*http_statuses: int) -> dict[int | str, dict[str, Any]]:
    """Declared error answers of a route; build_openapi gives them the Problem schema."""
    return {status: {"description": _description(status)} for status in http_statuses}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(title=app.title, version=app.version, description=DESCRIPTION,
                           routes=app.routes, tags=app.openapi_tags)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in Problem.model_json_schema(
            ref_template="#/components/schemas/{model}").pop("$defs", {}).items():
        schemas.setdefault(name, schema)
    problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    problem_schema.pop("$defs", None)
    schemas["Problem"] = problem_schema
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            _problem_answers(operation)
    for name in _FASTAPI_VALIDATION_SCHEMAS:
        schemas.pop(name, None)
    error_code = problem_schema["properties"]["error_code"]
    error_code["enum"] = sorted(PROBLEMS)
    # Each code's HTTP status and title, as the broker answers them: a client can map a code
    # it meets to its meaning without this broker's source, and a change to either is a
    # change to the published contract (the spec file's drift test sees it).
    error_code["x-twinlog-problems"] = {
        code: {"status": kind.http_status, "title": kind.title}
        for code, kind in sorted(PROBLEMS.items())}
    for schema in schemas.values():
        _property_maps(schema)
    _declare_limits(schemas, app.state.gateway.settings)
    _declare_delay_limits(document, app.state.gateway.settings)
    _properties_header_is_json(document)
    shape_for_clients(document)
    add_examples(document)
    return document


def _declare_limits(schemas: dict[str, Any], settings: Settings) -> None:
    """Bounds that are settings, as this broker has them: a client validating against the
    spec this broker serves is refused nothing the spec allows (openapi.json: the defaults)."""
    for model in ("TopicCreate", "TopicUpdate"):
        for name in ("read_queue_count", "write_queue_count"):
            for branch in schemas[model]["properties"][name]["anyOf"]:
                if branch.get("type") == "integer":
                    branch["maximum"] = settings.queues_per_topic_max
    for model in ("GroupCreate", "GroupUpdate"):  # the group's retry topics' queues
        field = schemas[model]["properties"]["retry_queue_count"]
        for branch in field.get("anyOf", [field]):
            if branch.get("type") == "integer":
                branch["maximum"] = settings.queues_per_topic_max
    schemas["ProduceBatch"]["properties"]["messages"]["maxItems"] = settings.max_batch_messages


def _declare_delay_limits(document: dict[str, Any], settings: Settings) -> None:
    """The delay fields' bounds as this broker's settings have them (the configured levels,
    timer_max_delay_ms); the delay headers are whole numbers when sent (a header has no
    null: left out is the absence)."""
    maxima = {"delay_level": len(parse_delay_levels(settings.delay_levels)),
              "delay_ms": settings.timer_max_delay_ms}
    for model in ("ProduceMessage", "ProduceBatchEntry"):
        properties = document["components"]["schemas"][model]["properties"]
        for name, maximum in maxima.items():
            for branch in properties[name]["anyOf"]:
                if branch.get("type") == "integer":
                    branch["maximum"] = maximum
    headers: dict[str, int | None] = {"X-Twinlog-Delay-Level": maxima["delay_level"],
                                      "X-Twinlog-Delay-Ms": maxima["delay_ms"],
                                      "X-Twinlog-Deliver-At-Ms": None}
    operation = document["paths"]["/v1/topics/{topic}/messages"]["post"]
    for parameter in operation["parameters"]:
        if parameter["name"] in headers:
            schema = parameter["schema"]
            (integer,) = [branch for branch in schema.pop("anyOf") if branch.get("type")
                          == "integer"]
            schema.update(integer)
            schema.pop("default", None)
            bound = headers[parameter["name"]]
            if bound is not None:
                schema["maximum"] = bound


def _property_maps(schema: dict[str, Any]) -> None:
    """pydantic writes dict[PropertyName, PropertyValue] as patternProperties, which lets any
    other name through with any value; the broker refuses those, and reserved names."""
    for field in schema.get("properties", {}).values():
        pattern_properties = field.pop("patternProperties", None)
        if pattern_properties is None:
            continue
        ((pattern, value_schema),) = pattern_properties.items()
        field["propertyNames"] = {**field.get("propertyNames", {}), "pattern": pattern,
                                  "not": {"enum": sorted(RESERVED_PROPERTY_NAMES)}}
        field["additionalProperties"] = value_schema


def _properties_header_is_json(document: dict[str, Any]) -> None:
    """X-Twinlog-Properties carries a JSON object: a string whose content is JSON of the
    schema of `properties` (JSON Schema's contentMediaType and contentSchema). A `schema`, not
    a `content` map: generators drop a header declared with `content`."""
    attributes = MessageAttributes.model_json_schema()
    _property_maps(attributes)
    schema = attributes["properties"]["properties"]
    schema.pop("default", None)
    operation = document["paths"]["/v1/topics/{topic}/messages"]["post"]
    for parameter in operation["parameters"]:
        if parameter["name"] == "X-Twinlog-Properties":
            parameter["schema"] = {"type": "string", "contentMediaType": "application/json",
                                   "contentSchema": schema}


def _problem_answers(operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    had_validation = responses.pop("422", None) is not None
    if had_validation and "400" not in responses:
        responses["400"] = {"description": _description(400)}
    for code, response in responses.items():
        # Declared by problem_responses (no content yet): a problem+json answer. A route that
        # gave an error answer a model of its own (readyz's 503) keeps it.
        if code.isdigit() and (int(code) >= 400 or code == "202") and "content" not in response:
            response["content"] = {PROBLEM_CONTENT_TYPE: {"schema": dict(_PROBLEM_REF)}}
    operation["responses"] = dict(sorted(responses.items()))


def install(app: FastAPI) -> None:
    """Serve build_openapi's document at /openapi.json (built once, on first use)."""
    cached: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not cached:
            cached.update(build_openapi(app))
        return cached

    app.openapi = openapi  # type: ignore[method-assign]


def render_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write(document: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_text(render_json(document), encoding="utf-8")
    temp.replace(path)

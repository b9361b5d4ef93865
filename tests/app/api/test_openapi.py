"""The OpenAPI document: generated from the app, kept in openapi/openapi.json, and good for
client generators (stable operation ids, problem+json errors, both produce content types)."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.api import openapi
from app.api.errors import PROBLEMS
from app.api.main import create_app
from app.api.schemas.fields import GROUP_PATTERN, TOPIC_PATTERN
from app.api.schemas.produce import BASE64_PATTERN, RESERVED_PROPERTY_NAMES
from app.cli.main import main as cli_main
from app.settings import Settings
from store import PutMessageStatus
from store.message_id import parse_msg_id

ROOT = Path(__file__).resolve().parents[3]
SPEC_FILE = ROOT / "openapi" / "openapi.json"

OPERATION_IDS = {
    "produce-message", "produce-batch", "consume-messages", "list-topics", "create-topic",
    "create-topics", "describe-topic", "list-groups", "create-group", "describe-group",
    "list-consumer-offsets", "get-message", "find-messages-by-key", "update-topic", "update-group",
    "delete-topic", "delete-group", "reset-consumer-offsets",
    "commit-consumer-offset", "get-consumer-lag", "admin-diff", "admin-ha", "admin-broker",
    "admin-store", "admin-sync-topics", "admin-sync-subscription-groups",
    "admin-sync-consumer-offsets", "admin-sync-delay-offsets", "admin-create-snapshot",
    "admin-ha-promote", "admin-ha-demote", "admin-dledger", "admin-dledger-transfer-leadership",
    "healthz", "readyz", "metrics", "cancel-delayed-message", "admin-timers",
    "receive-messages", "ack-messages", "change-invisibility",
}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app(Settings.model_construct()).openapi()


def _operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [operation for item in document["paths"].values() for operation in item.values()]


def test_file_matches_the_app(document: dict[str, Any]) -> None:
    """openapi/openapi.json is exactly what the app generates (run `twinlog openapi`)."""
    assert SPEC_FILE.read_text(encoding="utf-8") == openapi.render_json(document), (
        "openapi/openapi.json is stale: run `twinlog openapi`")


def test_check_command_reports_drift(tmp_path: Path) -> None:
    """`twinlog openapi --check` passes on a fresh file and fails on a changed one."""
    target = tmp_path / "openapi.json"
    assert cli_main(["openapi", "--output", str(target)]) == 0
    assert cli_main(["openapi", "--output", str(target), "--check"]) == 0
    target.write_text(target.read_text().replace("produce-message", "renamed"))
    assert cli_main(["openapi", "--output", str(target), "--check"]) == 1


def test_operation_ids_are_stable(document: dict[str, Any]) -> None:
    """Every operation has its fixed id (client generators name functions after them)."""
    assert {operation["operationId"] for operation in _operations(document)} == OPERATION_IDS


def test_produce_declares_both_content_types(document: dict[str, Any]) -> None:
    """Single produce takes JSON (the ProduceMessage schema) or a raw octet-stream body."""
    body = document["paths"]["/v1/topics/{topic}/messages"]["post"]["requestBody"]
    assert body["required"] is True
    content = body["content"]
    assert content["application/json"]["schema"]["$ref"].endswith("/ProduceMessage")
    assert content["application/octet-stream"]["schema"]["format"] == "binary"
    produce = document["paths"]["/v1/topics/{topic}/messages"]["post"]
    headers = {p["name"] for p in produce["parameters"] if p["in"] == "header"}
    assert {"Idempotency-Key", "X-Twinlog-Keys", "X-Twinlog-Tags",
            "X-Twinlog-Properties"} <= headers
    assert {"201", "202", "400", "413", "415", "429", "503", "507"} <= produce["responses"].keys()


def test_errors_are_problem_json(document: dict[str, Any]) -> None:
    """Every 4xx/5xx answer is application/problem+json with the Problem schema; no 422."""
    for operation in _operations(document):
        assert "422" not in operation["responses"], operation["operationId"]
        for code, response in operation["responses"].items():
            if int(code) >= 400 and operation["operationId"] != "readyz":
                schema = response["content"]["application/problem+json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Problem"}
    schemas = document["components"]["schemas"]
    assert "Problem" in schemas and "HTTPValidationError" not in schemas


def test_security_everywhere_but_health(document: dict[str, Any]) -> None:
    """Every operation but healthz and readyz declares the bearer requirement."""
    for operation in _operations(document):
        open_operation = operation["operationId"] in ("healthz", "readyz")
        assert ("security" in operation) is not open_operation, operation["operationId"]


def test_create_app_touches_no_disk_and_starts_no_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """create_app() with no arguments (the lead's hook) writes nothing and starts nothing."""
    monkeypatch.chdir(tmp_path)
    threads_before = threading.active_count()
    create_app().openapi()
    assert list(tmp_path.iterdir()) == []
    assert threading.active_count() == threads_before


def test_every_operation_has_an_example(document: dict[str, Any]) -> None:
    """Each operation carries an example: of its inputs when it takes any (every parameter and
    the JSON body), of its answer when it takes none."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            parameters = operation.get("parameters", [])
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            for parameter in parameters:
                holder = parameter["content"]["application/json"] \
                    if "content" in parameter else parameter
                assert "example" in holder, (where, parameter["name"])
            if body is not None:
                assert "example" in body, where
            if not parameters and body is None:
                answers = [content for code, answer in operation["responses"].items()
                           if code.startswith("2") for content in answer["content"].values()]
                assert any("example" in content for content in answers), where


def test_codes_and_statuses_are_enums(document: dict[str, Any]) -> None:
    """error_code lists every code of the error table; put_status, a result's status and a
    batch entry's error_code are the PutMessageStatus enum."""
    schemas = document["components"]["schemas"]
    assert schemas["Problem"]["properties"]["error_code"]["enum"] == sorted(PROBLEMS)
    status_values = sorted(status.value for status in PutMessageStatus)
    assert sorted(schemas["PutMessageStatus"]["enum"]) == status_values
    status_ref = {"$ref": "#/components/schemas/PutMessageStatus"}
    assert schemas["PutResult"]["properties"]["status"] == status_ref
    assert status_ref in schemas["PutResult"]["properties"]["error_code"]["anyOf"]
    assert status_ref in schemas["Problem"]["properties"]["put_status"]["anyOf"]


def test_declared_constraints_are_the_enforced_ones(document: dict[str, Any]) -> None:
    """The spec declares the bounds the broker checks: topic and group name patterns,
    property names (pattern, reserved names) and values, queue counts up to this broker's
    queues_per_topic_max, batch size up to max_batch_messages, base64 bodies."""
    schemas = document["components"]["schemas"]
    settings = Settings.model_construct()
    topic = schemas["TopicCreate"]["properties"]
    assert topic["name"]["pattern"] == TOPIC_PATTERN
    assert topic["permission"]["enum"] == [0, 2, 4, 6]
    assert {"type": "integer", "minimum": 1, "maximum": settings.queues_per_topic_max} in \
        topic["write_queue_count"]["anyOf"]
    assert schemas["GroupCreate"]["properties"]["name"]["pattern"] == GROUP_PATTERN
    assert schemas["ProduceBatch"]["properties"]["messages"]["maxItems"] == \
        settings.max_batch_messages
    properties = schemas["ProduceMessage"]["properties"]["properties"]
    assert "patternProperties" not in properties
    assert properties["propertyNames"]["not"]["enum"] == sorted(RESERVED_PROPERTY_NAMES)
    assert properties["additionalProperties"]["maxLength"] == 4096
    assert schemas["ProduceMessage"]["then"]["properties"]["body"]["pattern"] == BASE64_PATTERN


def _msg_id_pattern(document: dict[str, Any]) -> str:
    (parameter,) = document["paths"]["/v1/messages/{msg_id}"]["get"]["parameters"][:1]
    pattern: str = parameter["schema"]["pattern"]
    return pattern


@hypothesis_settings(max_examples=300, derandomize=True)
@given(text=st.one_of(st.text(max_size=40), st.text("0123456789abcdefABCDEFgx", min_size=30,
                                                    max_size=34)))
def test_message_id_pattern_is_what_the_server_parses(document: dict[str, Any],
                                                      text: str) -> None:
    """GET /v1/messages/{msg_id} declares exactly the ids the broker accepts: an id the
    pattern allows is parsed (then looked up: 200 or 404), any other one is refused (400)."""
    pattern = _msg_id_pattern(document)
    for candidate in (text, "0" * 32, "7" * 32, "0" * 16 + "8" + "0" * 15, "0" * 31, "0" * 33):
        assert (re.fullmatch(pattern, candidate) is not None) == \
            (parse_msg_id(candidate) is not None), candidate


def _nodes(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(found for value in node.values() for found in _nodes(value))]
    if isinstance(node, list):
        return [found for value in node for found in _nodes(value)]
    return []


def test_body_encoding_is_one_shared_schema(document: dict[str, Any]) -> None:
    """The utf8/base64 choice is one component (generators make one type of it), referenced by
    the produce and answer fields (a received message too), the three read parameters and
    the receive request."""
    shared = document["components"]["schemas"]["BodyEncoding"]
    assert shared["enum"] == ["utf8", "base64"]
    others = [node for node in _nodes(document)
              if "enum" in node and set(node["enum"]) == {"utf8", "base64"}]
    assert others == [shared]
    refs = [node for node in _nodes(document)
            if node.get("$ref") == "#/components/schemas/BodyEncoding"]
    assert len(refs) == 8


def test_request_schemas_leave_defaults_to_the_broker(document: dict[str, Any]) -> None:
    """A schema only requests use declares no `default` (openapi-typescript would make such a
    field required) and says the default in words; answers keep theirs."""
    schemas = document["components"]["schemas"]
    for name in ("ProduceMessage", "ProduceBatchEntry", "GroupCreate", "OffsetCommit",
                 "TopicCreate", "PromoteRequest"):
        for field_name, field in schemas[name]["properties"].items():
            assert "default" not in field, (name, field_name)
    assert "Default: `utf8`." in schemas["ProduceMessage"]["properties"]["body_encoding"][
        "description"]
    assert "Default: `false`." in schemas["OffsetCommit"]["properties"]["allow_backwards"][
        "description"]
    assert schemas["PutResult"]["properties"]["replayed"]["default"] is False


def test_properties_header_is_a_json_string_schema(document: dict[str, Any]) -> None:
    """X-Twinlog-Properties has a `schema` (generators drop a `content` parameter): a string
    whose content is a JSON object of the properties' schema."""
    produce = document["paths"]["/v1/topics/{topic}/messages"]["post"]
    (header,) = [p for p in produce["parameters"] if p["name"] == "X-Twinlog-Properties"]
    assert "content" not in header
    assert header["schema"]["type"] == "string"
    assert header["schema"]["contentMediaType"] == "application/json"
    assert header["schema"]["contentSchema"]["type"] == "object"
    assert header["example"] == '{"region": "eu"}'

"""The docs in the repository: complete against the spec and the CLI, and self-contained."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
HTTP_API = ROOT / "docs" / "http-api.md"
SPEC = ROOT / "openapi" / "openapi.json"
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

_CURL_URL = re.compile(r'"\$[MS](?P<path>/[^"?]*)')
_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


def _operations() -> list[tuple[str, str, str]]:
    """(METHOD, path template, operationId) of every operation of the spec."""
    spec = json.loads(SPEC.read_text(encoding="utf-8"))
    return [(method.upper(), path, operation["operationId"])
            for path, item in spec["paths"].items() for method, operation in item.items()]


def _path_pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("".join("[^/]+" if part.startswith("{") else re.escape(part)
                              for part in parts) + "$")


def _curl_commands() -> list[tuple[str, str]]:
    """(METHOD, path) of every `$ curl` example of docs/http-api.md."""
    commands = []
    for line in HTTP_API.read_text(encoding="utf-8").splitlines():
        if not line.startswith("$ curl"):
            continue
        explicit = re.search(r"-X (\w+)", line)
        sends_body = " -d " in line or "--data-binary" in line
        method = explicit.group(1) if explicit else ("POST" if sends_body else "GET")
        url = _CURL_URL.search(line)
        assert url is not None, f"no $M or $S URL in: {line}"
        commands.append((method, url.group("path")))
    return commands


def test_every_operation_has_a_section_and_a_curl_example() -> None:
    """Each operation of openapi.json has its heading and at least one curl example."""
    text = HTTP_API.read_text(encoding="utf-8")
    commands = _curl_commands()
    for method, path, operation_id in _operations():
        assert f"### `{method} {path}` (`{operation_id}`)" in text, operation_id
        pattern = _path_pattern(path)
        assert any(verb == method and pattern.match(used) for verb, used in commands), (
            f"{operation_id}: no curl example for {method} {path}")


def test_every_curl_example_names_an_operation() -> None:
    """No example uses a method and path the spec does not have (a renamed route shows)."""
    patterns = [(method, _path_pattern(path)) for method, path, _ in _operations()]
    for method, used in _curl_commands():
        assert any(verb == method and pattern.match(used) for verb, pattern in patterns), (
            f"{method} {used} is not an operation of openapi/openapi.json")


@pytest.mark.parametrize("document", DOCS, ids=lambda path: path.name)
def test_docs_point_only_inside_the_repository(document: Path) -> None:
    """No doc names a file outside the repository, and every relative link resolves."""
    text = document.read_text(encoding="utf-8")
    # Nothing beside the checkout (team folders) is the users' to read.
    for sibling in ROOT.parent.iterdir():
        if sibling != ROOT:
            assert f"../{sibling.name}/" not in text, f"{document.name} names ../{sibling.name}"
    assert "/work/" not in text
    for match in _LINK.finditer(text):
        target = match.group("target")
        if re.match(r"[a-z]+:", target):
            continue  # a URL, not a file
        resolved = (document.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{document.name}: {target} leaves the repo"
        assert resolved.exists(), f"{document.name}: {target} does not exist"


def _subcommands() -> list[str]:
    """The subcommands of `twinlog`, as its parser holds them."""
    parser = build_parser()
    action = next(action for action in parser._actions if action.dest == "command")
    assert isinstance(action.choices, dict) and action.choices, "twinlog has no subcommands?"
    return list(action.choices)


def test_readme_lists_every_cli_command() -> None:
    """README's command list names every subcommand `twinlog --help` shows."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    help_text = build_parser().format_help()
    for name in _subcommands():
        assert name in help_text
        assert f"`twinlog {name}" in readme, f"README does not list `twinlog {name}`"


def test_readme_names_no_command_twinlog_lacks() -> None:
    """Every `twinlog NAME` the README shows is a subcommand (a removed one shows)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    subcommands = _subcommands()
    for name in re.findall(r"`twinlog ([a-z][a-z-]*)", readme):
        assert name in subcommands, f"README shows `twinlog {name}`, which twinlog lacks"


_NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def test_readme_describes_make_bench_as_the_makefile_runs_it() -> None:
    """README says how many scripts `make bench` runs and lists each one the Makefile runs."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    scripts = re.findall(r"bench/[a-z_]+\.py", recipe)
    assert scripts, "no script in the bench target?"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    assert f"`make bench` runs {_NUMBERS[len(scripts)]} scripts" in section
    for script in scripts:
        assert f"`{script}`" in section, f"README's Benchmarks section omits {script}"


def test_readme_indexes_every_doc() -> None:
    """The README's docs index links every file of docs/ and the sample twinlog.toml."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "twinlog.toml"]:
        relative = path.relative_to(ROOT).as_posix()
        assert f"]({relative})" in readme, f"README's docs index omits {relative}"


def _route_scopes() -> dict[tuple[str, str], str | None]:
    """(METHOD, path) -> the token scope the route requires (None: no token needed), read
    from the app's routes (the ScopeCheck dependency `requires` adds)."""
    from fastapi.routing import APIRoute

    from app.api.deps import ScopeCheck
    from app.api.main import create_app
    from app.settings import Settings

    def routes(items: list[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
        for item in items:
            included = getattr(item, "original_router", None)  # an included router
            if included is not None:
                yield from routes(included.routes, prefix + included.prefix)
            elif isinstance(item, APIRoute) or hasattr(item, "dependant"):
                yield prefix, item

    scopes: dict[tuple[str, str], str | None] = {}
    for prefix, route in routes(create_app(Settings.model_construct()).routes):
        if not route.include_in_schema:
            continue
        checks = [dependency.call.token_scope for dependency in route.dependant.dependencies
                  if isinstance(dependency.call, ScopeCheck)]
        path = route.path if route.path.startswith(prefix) else prefix + route.path
        for method in route.methods:
            scopes[(method, path)] = checks[0].value if checks else None
    return scopes


def _documented_scopes() -> dict[tuple[str, str], str | None]:
    """(METHOD, path) -> the scope docs/http-api.md names for the operation: `Scope X` in its
    own section, else in the `##` section above it; None where it says no token is needed."""
    documented: dict[tuple[str, str], str | None] = {}
    section_scope: str | None = None
    text = HTTP_API.read_text(encoding="utf-8")
    for block in re.split(r"\n(?=##+ )", text):
        heading, _, body = block.partition("\n")
        named = re.search(r"[Ss]cope `(\w+)`", body.split("```")[0])
        if heading.startswith("## "):
            section_scope = named[1] if named else None
        operation = re.match(r"### `(\w+) (\S+)` \(`", heading)
        if operation:
            said = None if "No token needed" in body else (
                named[1] if named else section_scope)
            documented[(operation[1], operation[2])] = said
    return documented


def test_http_api_names_the_scope_each_operation_needs() -> None:
    """Each operation's section names the scope its route checks (GET admin views and
    /metrics need `monitor`, which an admin token includes)."""
    actual = _route_scopes()
    documented = _documented_scopes()
    assert set(documented) == set(actual)
    wrong = {operation: (documented[operation], scope) for operation, scope in actual.items()
             if documented[operation] != scope}
    assert not wrong, f"(documented, required) differ: {wrong}"


def test_every_scope_is_documented_where_tokens_are() -> None:
    """operations.md's auth_tokens and the spec's description (Swagger UI's first page) name
    every scope; operations.md says the scope /metrics needs."""
    from app.api.openapi import DESCRIPTION
    from app.settings import Scope

    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    paragraph = operations.split("- **`auth_tokens`**", 1)[1].split("\n- ", 1)[0]
    for scope in Scope:
        assert f"`{scope.value}`" in paragraph, f"operations.md's auth_tokens: {scope.value}"
        assert f"`{scope.value}`" in DESCRIPTION, f"the spec's description: {scope.value}"
    metrics_scope = _route_scopes()[("GET", "/metrics")]
    assert f"`/metrics` needs `{metrics_scope}`" in " ".join(paragraph.split())
    assert f"`GET /metrics` (scope `{metrics_scope}`)" in operations


def _metric_families() -> set[str]:
    """Every twinlog_* family the broker defines (the metrics modules of app/api), counters
    with the `_total` the exposition adds."""
    families = set()
    for module in sorted((ROOT / "app" / "api").glob("metrics*.py")):
        source = module.read_text(encoding="utf-8")
        for kind, name in re.findall(r'(Counter|Gauge|Histogram|Summary)\w*\(\s*"(twinlog_\w+)"',
                                     source):
            families.add(f"{name}_total" if kind == "Counter" and not name.endswith("_total")
                         else name)
    return families


def test_metrics_md_describes_every_series() -> None:
    """Each twinlog_* family the broker exposes has its row in docs/metrics.md, and each row
    names a family the broker has."""
    families = _metric_families()
    assert len(families) > 20, families
    rows = set(re.findall(r"^\| `(twinlog_\w+)` \|",
                          (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8"), re.M))
    assert families - rows == set(), f"metrics.md lacks {sorted(families - rows)}"
    assert rows - families == set(), f"metrics.md names {sorted(rows - families)}"


_MSG_ID = re.compile(r"\b7F000001[0-9A-F]{24}\b")


@pytest.mark.parametrize("document", DOCS, ids=lambda path: path.name)
def test_example_msg_ids_name_a_port(document: Path) -> None:
    """A msg id in the docs is what a broker hands out: its STOREHOST names a real port
    (port 0 is what a broker started on `--http-port 0` writes, never a documented setup)."""
    from store.message_id import parse_msg_id

    for msg_id in _MSG_ID.findall(document.read_text(encoding="utf-8")):
        port = int.from_bytes(parse_msg_id(msg_id).store_host[4:8], "big")
        assert port != 0, f"{document.name}: {msg_id} names port 0"


def test_a_status_next_to_an_error_code_is_the_code_s() -> None:
    """`409 QUEUE_COUNT_SHRINKS`, `exit 1, 409 ...`: a status written before an error code is
    the status the broker answers it with (app/api/errors.py)."""
    from app.api.errors import PROBLEMS

    for document in DOCS:
        text = document.read_text(encoding="utf-8")
        for status, code in re.findall(r"\b([1-5]\d\d),? `?([A-Z][A-Z_]{3,})`?", text):
            if code in PROBLEMS and code != "PUT_OK":
                assert int(status) == PROBLEMS[code].http_status, (
                    f"{document.name}: {status} {code}, answered with "
                    f"{PROBLEMS[code].http_status}")

"""The docs in the repository: complete against the spec and the CLI, and self-contained."""

from __future__ import annotations

import json
import re
from pathlib import Path

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

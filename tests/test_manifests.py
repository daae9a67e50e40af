"""The distribution manifests agree with their published schemas and with the package they describe.

server.json (MCP registry), .cursor-plugin/plugin.json (Cursor), .claude-plugin/{plugin,marketplace}.json
(Claude Code) and gemini-extension.json each name the same package, version and server command; every
path they name exists; the registry entry's arguments are ones `mltriage serve` accepts.
"""

import json
import re
from pathlib import Path, PurePosixPath

import jsonschema
import pytest

from server.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "tests" / "fixtures" / "registry"
# the [project] fields these tests compare (tomllib is 3.11+; the package supports 3.10)
PYPROJECT = {k: re.search(rf'^{k}\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]
             for k in ("name", "version", "readme")}
KEBAB = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")


def load(rel: str) -> dict:
    return json.loads((REPO / rel).read_text())


def validator(schema_file: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / schema_file).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def errors(v, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]


def inside_repo(rel: str) -> Path:
    """A manifest path, relative and inside the repository, resolved; anything else fails the test."""
    assert not PurePosixPath(rel).is_absolute() and ".." not in PurePosixPath(rel).parts, rel
    path = (REPO / rel).resolve()
    assert path.is_relative_to(REPO) and path.exists(), f"{rel} does not exist in the repository"
    return path


# --- server.json, the MCP registry entry ------------------------------------------------------------


def test_server_json_is_valid_against_the_registry_schema_it_names():
    doc = load("server.json")
    v = validator("server.schema.2025-12-11.json")
    assert doc["$schema"] == v.schema["$id"]
    assert errors(v, doc) == []


def test_the_registry_schema_really_rejects_a_broken_entry():
    # the vendored schema is not a no-op: the registry's own rules (name shape, package version) bite
    doc = load("server.json")
    v = validator("server.schema.2025-12-11.json")
    assert errors(v, {**doc, "name": "mltriage"})
    assert errors(v, {**doc, "description": "x" * 101})
    assert errors(v, {**doc, "packages": [{**doc["packages"][0], "version": "latest"}]})


def test_server_json_names_this_package_its_version_and_the_readme_marker_the_registry_checks():
    doc = load("server.json")
    [pkg] = doc["packages"]
    assert pkg["registryType"] == "pypi" and pkg["identifier"] == PYPROJECT["name"]
    assert doc["version"] == pkg["version"] == PYPROJECT["version"]
    assert pkg["transport"] == {"type": "stdio"} and pkg["runtimeHint"] == "uvx"
    # PyPI ownership: the registry looks for `mcp-name: <name>` in the package README (its PyPI description)
    assert re.search(rf"mcp-name: {re.escape(doc['name'])}(\s|-->)", (REPO / PYPROJECT["readme"]).read_text())


def test_server_json_arguments_are_ones_mltriage_serve_accepts():
    [pkg] = load("server.json")["packages"]
    positional = [a["value"] for a in pkg["packageArguments"] if a["type"] == "positional"]
    named = [a["name"] for a in pkg["packageArguments"] if a["type"] == "named"]
    assert positional == ["serve"] and "--workspace" in named
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    options = {s for action in serve._actions for s in action.option_strings}
    assert set(named) <= options, set(named) - options
    used = "".join(p.read_text() for p in (REPO / "tools").rglob("*.py"))
    for env in pkg["environmentVariables"]:
        assert env["name"] in used, f"{env['name']} is documented but nothing reads it"


# --- plugin manifests: Cursor, Claude Code (plugin + marketplace), Gemini CLI ------------------------


def test_cursor_plugin_manifest_is_valid_and_everything_it_names_exists():
    doc = load(".cursor-plugin/plugin.json")
    assert errors(validator("cursor-plugin.schema.json"), doc) == []
    assert doc["name"] == PYPROJECT["name"] and doc["version"] == PYPROJECT["version"]
    assert (inside_repo(doc["skills"]) / "ml-training-triage" / "SKILL.md").is_file()
    servers = json.loads(inside_repo(doc["mcpServers"]).read_text())["mcpServers"]
    assert servers["mltriage"]["command"] == "mltriage" and servers["mltriage"]["args"][0] == "serve"


def test_claude_marketplace_lists_the_plugin_this_repository_is():
    market = load(".claude-plugin/marketplace.json")
    assert KEBAB.match(market["name"]) and market["owner"]["name"]
    assert market["plugins"], "a marketplace lists at least one plugin"
    names = [p["name"] for p in market["plugins"]]
    assert len(names) == len(set(names))
    for entry in market["plugins"]:
        assert KEBAB.match(entry["name"])
        root = inside_repo(entry["source"])  # a relative source resolves from the marketplace root
        plugin = json.loads((root / ".claude-plugin" / "plugin.json").read_text())
        assert plugin["name"] == entry["name"] and entry.get("version", plugin["version"]) == plugin["version"]
        # a Claude Code plugin picks up skills/ and .mcp.json from its root by default
        assert (root / "skills" / "ml-training-triage" / "SKILL.md").is_file()
        assert "mltriage" in json.loads((root / ".mcp.json").read_text())["mcpServers"]


@pytest.mark.parametrize("rel", [".claude-plugin/plugin.json", ".cursor-plugin/plugin.json", "gemini-extension.json",
                                 ".claude-plugin/marketplace.json"])
def test_every_manifest_carries_the_package_version(rel):
    doc = load(rel)
    versions = [doc["version"]] if "version" in doc else [p["version"] for p in doc["plugins"]]
    assert versions and set(versions) == {PYPROJECT["version"]}

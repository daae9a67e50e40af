"""Errors an agent can act on, over a real stdio client: JSON-RPC codes the spec names, readable tool errors."""

from importlib import metadata

import pytest
from conftest import ROOT, run, stdio_client, text_of
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

pytestmark = pytest.mark.usefixtures("no_stray_processes")


def test_prompt_errors_are_invalid_params_and_server_version_is_set(workspace):
    async def body():
        async with stdio_client(workspace) as client:
            with pytest.raises(MCPError) as unknown:
                await client.get_prompt("no_such_prompt", {})
            assert unknown.value.code == INVALID_PARAMS and "no_such_prompt" in unknown.value.message
            assert "triage_training_failure" in unknown.value.message  # says what exists

            with pytest.raises(MCPError) as missing:
                await client.get_prompt("triage_training_failure", {})
            assert missing.value.code == INVALID_PARAMS and "symptom" in missing.value.message

            with pytest.raises(MCPError) as bad_skill:  # decided by the prompt itself: still -32602
                await client.get_prompt("use_skill", {"name": "nope"})
            assert bad_skill.value.code == INVALID_PARAMS

            ok = await client.get_prompt("triage_training_failure", {"symptom": "loss is NaN"})
            assert ok.messages
            return client.server_info

    info = run(body)
    assert info is not None and info.version == metadata.version("mltriage")


def test_server_version_falls_back_to_pyproject(monkeypatch):
    from importlib import metadata as md

    import server.core as core

    def missing(name):
        raise md.PackageNotFoundError(name)

    import tomllib

    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    monkeypatch.setattr(md, "version", missing)
    assert core._version() == expected


def test_run_training_unclosed_quote_is_clear_and_leaves_no_run(workspace):
    (workspace / "train.py").write_text("print('hi')\n")

    async def body():
        async with stdio_client(workspace) as client:
            r = await client.call_tool("run_training", {"command": "python train.py --name 'oops",
                                                        "log_path": "logs/train.log"})
            return r

    r = run(body)
    assert r.is_error and "cannot parse the command" in text_of(r) and "quote" in text_of(r).lower()
    runs = workspace / ".mltriage" / "runs"
    assert not runs.exists() or not any(runs.iterdir())
    assert not (workspace / "logs").exists()

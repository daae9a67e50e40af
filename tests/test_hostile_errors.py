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


def test_run_training_with_a_directory_as_log_path_is_clear_over_stdio_and_leaves_no_run(workspace):
    (workspace / "train.py").write_text("print('hi')\n")
    (workspace / "logs").mkdir()

    async def body():
        async with stdio_client(workspace) as client:
            return await client.call_tool("run_training", {"command": ["python", "train.py"], "log_path": "logs"})

    r = run(body)
    assert r.is_error and "'logs' is a directory" in text_of(r) and "logs/train.log" in text_of(r), text_of(r)
    runs = workspace / ".mltriage" / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "no orphan run directory"
    assert list((workspace / "logs").iterdir()) == []


def test_live_status_of_a_pid_says_why_it_cannot_look(workspace):
    async def body():
        async with stdio_client(workspace) as client:
            return {run_id: await client.call_tool("live_status", {"run": run_id})
                    for run_id in ("pid:1", "pid:999999999", "pid:abc", "pid:-3")}

    r = {k: text_of(v) for k, v in run(body).items()}
    # pid 1 is another user's (or hidden in a container) or, where it can be read, outside the workspace
    assert "not allowed to look at process 1" in r["pid:1"] or "outside the workspace" in r["pid:1"], r["pid:1"]
    assert "(pid=1)" not in r["pid:1"], "psutil's bare message is not a reason"
    assert "no process 999999999" in r["pid:999999999"], r["pid:999999999"]
    assert "'abc' is not a process id" in r["pid:abc"] and "'-3' is not a process id" in r["pid:-3"], r
    assert all("list_runs" in t for t in r.values()), r


def test_target_and_command_together_are_refused_not_one_silently_ignored(workspace):
    (workspace / "train.py").write_text("print('hi')\n")
    (workspace / "model.py").write_text("def make_target():\n    raise SystemExit('must not run')\n")

    async def body():
        async with stdio_client(workspace) as client:
            both = {"target": "model.py:make_target", "command": ["python", "train.py"], "timeout_s": 30}
            return [await client.call_tool(name, both) for name in ("grad_norm_snapshot", "nan_hook_run")]

    for r in run(body):
        assert r.is_error and "pass exactly one of target or command" in text_of(r), text_of(r)


def test_random_bytes_are_not_a_checkpoint_and_not_code(workspace):
    import os

    (workspace / "random.pt").write_bytes(os.urandom(4096))
    (workspace / "notes.pt").write_text("step 1 loss 2.3\n" * 50)

    async def body():
        async with stdio_client(workspace) as client:
            return [await client.call_tool("inspect_checkpoint", {"path": p}) for p in ("random.pt", "notes.pt")]

    for r in run(body):
        text = text_of(r)
        assert "not a torch checkpoint" in text or "could not read the checkpoint" in text, text
        assert "run code" not in text, text
        if not r.is_error:
            assert r.structured_content["loaded"] is False and r.structured_content["unsafe_globals"] == []


def test_triage_with_a_budget_too_small_for_any_step_says_nothing_was_checked_and_not_healthy(workspace):
    (workspace / "train.log").write_text("".join(f"step {i} | loss {2.3 - i / 100:.3f}\n" for i in range(50)))

    async def body():
        async with stdio_client(workspace) as client:
            return await client.call_tool("triage", {"log_path": "train.log", "budget_s": 5})

    r = run(body)
    rep = r.structured_content
    assert not r.is_error and rep["healthy"] is False, rep
    assert all(s["status"] == "skipped" for s in rep["steps"]), rep["steps"]
    top = rep["findings"][0]
    assert top["confidence"] == 0.0 and "nothing was checked" in top["summary"], top
    assert all("nothing is broken" not in s["why"] for s in rep["next_steps"]), rep["next_steps"]

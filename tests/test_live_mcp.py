"""Live runs over a real stdio MCP session (`python -m server`): a run outlives the session that started it,
and a later session finds it, watches it and stops it, leaving no process behind."""

import json
import os
import signal
import time
from pathlib import Path

import anyio
import psutil

from conftest import run, stdio_client, text_of
from tools import live

FIX = Path(__file__).resolve().parent / "fixtures" / "live"


def _state(workspace: Path, run_id: str) -> dict:
    return json.loads((workspace / ".mltriage" / "runs" / run_id / "state.json").read_text())


def test_a_run_outlives_the_mcp_session_and_a_later_session_stops_it(workspace, no_stray_processes):
    state: dict = {}

    async def first_session():
        async with stdio_client(workspace) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert {"run_training", "list_runs", "live_status", "live_action", "inspect_checkpoint"} <= tools
            r = await c.call_tool("run_training", {"command": ["python", str(FIX / "normal.py")],
                                                   "log_path": "logs/train.log", "name": "survivor"},)
            assert not r.is_error, text_of(r)
            state["id"] = r.structured_content["run"]["id"]
            state["pid"] = r.structured_content["run"]["pid"]
            deadline = time.monotonic() + 40
            while True:
                s = (await c.call_tool("live_status", {"run": state["id"], "what": ["progress"]})).structured_content
                if s["progress"] and s["progress"][0]["step"] >= 2:
                    break
                assert time.monotonic() < deadline, s
                await anyio.sleep(0.3)

    async def second_session():
        async with stdio_client(workspace) as c:
            runs = (await c.call_tool("list_runs", {})).structured_content["runs"]
            assert [(r["id"], r["status"]) for r in runs] == [(state["id"], "running")]
            s = (await c.call_tool("live_status", {"run": state["id"], "what": ["progress", "optimizer"]})).structured_content
            step = s["progress"][0]["step"]
            assert s["optimizer"][0]["type"] == "SGD"
            await anyio.sleep(0.5)
            s = (await c.call_tool("live_status", {"run": state["id"], "what": ["progress"]})).structured_content
            assert s["progress"][0]["step"] > step  # still training after its first session ended
            r = await c.call_tool("live_action", {"run": state["id"], "action": "save_checkpoint", "path": "ck/live.pt"})
            assert r.structured_content["applied"], text_of(r)
            r = await c.call_tool("inspect_checkpoint", {"path": "ck/live.pt"})
            assert r.structured_content["loaded"] and r.structured_content["n_params"] == 577
            r = await c.call_tool("live_action", {"run": state["id"], "action": "stop"})
            assert r.structured_content["applied"], text_of(r)
            assert r.structured_content["results"][0]["after"]["processes_left"] == 0

    try:
        run(first_session)
        # the server is gone; the run is not its child any more and keeps going
        assert psutil.pid_exists(state["pid"]) and psutil.Process(state["pid"]).status() != psutil.STATUS_ZOMBIE
        run(second_session)
        assert live.session_processes(_state(workspace, state["id"])) == []
        log = (workspace / "logs" / "train.log").read_text()
        assert "save_checkpoint" in log and "stop applied" in log
        saved = json.loads((workspace / ".mltriage" / "runs" / state["id"] / "state.json").read_text())
        assert [a["action"] for a in saved["actions"]] == ["save_checkpoint", "stop"]
    finally:
        for p in live.session_processes(_state(workspace, state["id"]) if "id" in state else {}):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass

"""Live runs on CPU: real training processes launched with run_training, watched and steered through the
in-process MCP client; checkpoints read back safely. Every test kills whatever it started."""

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest

from conftest import PYTHON, inprocess_client, run, text_of
from tools import live

FIX = Path(__file__).resolve().parent / "fixtures" / "live"


def _line_of(script: str, text: str) -> int:
    return next(i for i, line in enumerate((FIX / script).read_text().splitlines(), 1) if text in line)


def _all_run_processes(ws: Path) -> list[psutil.Process]:
    procs = []
    for state_file in (ws / ".mltriage" / "runs").glob("*/state.json"):
        procs += live.session_processes(json.loads(state_file.read_text()))
    return procs


@pytest.fixture
def ws(workspace):
    """A workspace whose runs are all killed at the end, whatever the test did."""
    yield workspace
    for p in _all_run_processes(workspace):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.kill()
        except psutil.Error:
            pass
    for child in live._children.values():
        child.poll()


async def _start(c, script: str, *args: str, log: str = "run.log") -> str:
    r = await c.call_tool("run_training", {"command": [PYTHON, str(FIX / script), *args], "log_path": log})
    assert not r.is_error, text_of(r)
    return r.structured_content["run"]["id"]


async def _status(c, run_id: str, *what: str, **kw) -> dict:
    r = await c.call_tool("live_status", {"run": run_id, "what": list(what), **kw})
    assert not r.is_error, text_of(r)
    return r.structured_content


async def _until(c, run_id: str, what: list[str], ok, timeout: float = 40.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        s = await _status(c, run_id, *what)
        if ok(s):
            return s
        assert time.monotonic() < deadline, f"condition not met within {timeout} s: {json.dumps(s)[:3000]}"
        await anyio.sleep(0.3)


def _step(s: dict) -> int:
    return min((p["step"] for p in s["progress"]), default=0)


def test_data_loader_hang_is_named_by_its_blocking_frame(ws):
    async def body():
        async with inprocess_client(ws) as c:
            rid = await _start(c, "hang_loader.py")
            s = await _until(c, rid, ["progress", "stack"],
                             lambda s: any(f["failure_mode"] == "hang" for f in s["findings"]))
            hang = next(f for f in s["findings"] if f["failure_mode"] == "hang")
            assert _step(s) == 4  # 64 samples / batch 16, then the loader blocks
            assert hang["location"].endswith(f"hang_loader.py:{_line_of('hang_loader.py', 'shard_ready.wait()')}"), hang
            assert "DataLoader" in hang["summary"]
            main = next(t for t in s["stacks"] if t["main"])
            assert any(f["func"] == "__getitem__" and "shard_ready.wait()" in f["code"] for f in main["frames"])

    run(body)


def test_memory_that_grows_every_step_is_found_with_the_step_it_started(ws):
    async def body():
        async with inprocess_client(ws) as c:
            rid = await _start(c, "leak.py")
            await _until(c, rid, ["progress"], lambda s: _step(s) >= 25)
            s = await _status(c, rid, "memory")
            trend = s["memory"][0]
            assert trend["growing"] and trend["kind"] == "rss"
            assert trend["slope_bytes_per_step"] > 3 * 2**20  # each step keeps a 4 MiB input alive
            assert trend["growth_since_step"] <= 5
            assert any(f["failure_mode"] == "oom" for f in s["findings"])

    run(body)


def test_slow_module_is_ranked_first(ws):
    async def body():
        async with inprocess_client(ws) as c:
            rid = await _start(c, "slow_module.py")
            await _until(c, rid, ["progress"], lambda s: _step(s) >= 2)
            s = await _status(c, rid, "modules", steps=3)
            assert s["modules"][0]["module"] == "body.2" and s["modules"][0]["type"] == "Normalizer", s["modules"][:3]
            slow = next(f for f in s["findings"] if f["failure_mode"] == "slow_throughput")
            assert slow["location"] == "body.2"
            # timing is switched off again: the hooks are gone once the steps are collected
            again = await _status(c, rid, "progress")
            assert not again["progress"][0]["instrument_errors"]

    run(body)


def test_scale_lr_changes_the_lr_of_the_next_steps_in_the_log_and_the_optimizer(ws):
    async def body():
        async with inprocess_client(ws) as c:
            rid = await _start(c, "normal.py", "--lr", "0.05", log="logs/normal.log")
            await _until(c, rid, ["progress"], lambda s: _step(s) >= 3)
            r = await c.call_tool("live_action", {"run": rid, "action": "scale_lr", "factor": 0.1})
            act = r.structured_content
            assert act["applied"], text_of(r)
            res = act["results"][0]
            assert res["before"] == {"lr": [[0.05]]} and res["after"]["lr"][0][0] == pytest.approx(0.005)
            s = await _status(c, rid, "optimizer", "memory")
            assert s["optimizer"][0]["groups"][0]["lr"] == pytest.approx(0.005)
            assert not s["memory"][0]["growing"]  # a healthy run: no leak reported
            applied = res["applied_at_step"]
            await _until(c, rid, ["progress"], lambda s: _step(s) >= applied + 2)
            log = (ws / "logs" / "normal.log").read_text()
            assert f"step {applied} loss" in log and "lr 0.05\n" in log
            assert f"step {applied + 1} loss" in log and "lr 0.005\n" in log.split(f"step {applied + 1} loss")[1]
            assert "scale_lr{'factor': 0.1} applied" in log  # the instrument's record in the run's log
            state = json.loads(next((ws / ".mltriage" / "runs").glob("*/state.json")).read_text())
            assert state["actions"][0]["action"] == "scale_lr" and state["actions"][0]["applied"]
            r = await c.call_tool("live_action", {"run": rid, "action": "set_grad_clip", "max_norm": 0.5})
            assert r.structured_content["results"][0]["after"] == {"max_norm": 0.5}
            s = await _status(c, rid, "progress")
            assert s["progress"][0]["grad_clip"] == 0.5

    run(body)


def test_save_checkpoint_from_a_live_run_reads_back_with_inspect_checkpoint(ws):
    async def body():
        async with inprocess_client(ws) as c:
            rid = await _start(c, "normal.py")
            await _until(c, rid, ["progress"], lambda s: _step(s) >= 3)
            first = await c.call_tool("live_action", {"run": rid, "action": "save_checkpoint", "path": "ckpt/a.pt"})
            assert first.structured_content["applied"], text_of(first)
            step_a = first.structured_content["results"][0]["applied_at_step"]
            await _until(c, rid, ["progress"], lambda s: _step(s) >= step_a + 5)
            second = await c.call_tool("live_action", {"run": rid, "action": "save_checkpoint", "path": "ckpt/b.pt"})
            assert second.structured_content["applied"]
            again = await c.call_tool("live_action", {"run": rid, "action": "save_checkpoint", "path": "ckpt/b.pt"})
            assert again.is_error and "exists" in text_of(again)  # nothing is overwritten

            r = await c.call_tool("inspect_checkpoint", {"path": "ckpt/b.pt", "compare_to": "ckpt/a.pt"})
            rep = r.structured_content
            assert rep["loaded"] and rep["step"] == second.structured_content["results"][0]["applied_at_step"]
            assert rep["n_params"] == 16 * 32 + 32 + 32 + 1
            assert {m["module"] for m in rep["modules"]} == {"0", "2"}
            assert rep["optimizers"][0]["groups"][0]["lr"] == pytest.approx(0.05)
            assert rep["compare"]["n_changed"] == 4 and rep["compare"]["n_unchanged"] == 0

    run(body)


def test_stop_ends_the_run_at_a_step_boundary_and_leaves_no_process(ws):
    async def body():
        async with inprocess_client(ws) as c:
            rid = await _start(c, "normal.py")
            s = await _until(c, rid, ["progress"], lambda s: _step(s) >= 3)
            pid = s["progress"][0]["pid"]
            r = await c.call_tool("live_action", {"run": rid, "action": "stop"})
            rep = r.structured_content
            assert rep["applied"] and rep["results"][0]["after"]["how"] == "graceful stop at a step boundary"
            assert rep["results"][0]["after"]["processes_left"] == 0
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            assert _all_run_processes(ws) == []
            runs = (await c.call_tool("list_runs", {})).structured_content["runs"]
            assert runs[0]["status"] == "stopped" and runs[0]["exit_code"] == 0
            after = await c.call_tool("live_action", {"run": rid, "action": "scale_lr", "factor": 0.5})
            assert after.is_error and "stopped" in text_of(after)

    run(body)


def test_dead_stale_and_frozen_runs_answer_at_once_instead_of_hanging(ws):
    async def body():
        async with inprocess_client(ws) as c:
            done = await _start(c, "normal.py", "--steps", "3", "--sleep", "0")
            frozen = await _start(c, "normal.py")
            deadline = time.monotonic() + 40
            def status_of(runs, rid):
                return next(r["status"] for r in runs if r["id"] == rid)
            while status_of((await c.call_tool("list_runs", {})).structured_content["runs"], done) != "finished":
                assert time.monotonic() < deadline
                await anyio.sleep(0.3)
            t = time.monotonic()
            s = await _status(c, done, "progress", "stack")
            assert time.monotonic() - t < 2 and s["run"]["status"] == "finished" and "stack" in s["unavailable"]
            assert s["progress"][0]["step"] == 3  # the last state it wrote is still there

            s = await _until(c, frozen, ["progress"], lambda s: _step(s) >= 2)
            pid = s["progress"][0]["pid"]
            os.kill(pid, signal.SIGSTOP)  # alive, socket present, but never answers
            try:
                while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
                    await anyio.sleep(0.05)
                t = time.monotonic()
                s = await _status(c, frozen, "progress", "optimizer")
                assert time.monotonic() - t < 3.5
                assert "no answer within" in s["unavailable"].get("progress rank 0", ""), s
            finally:
                os.kill(pid, signal.SIGCONT)

            os.kill(pid, signal.SIGKILL)  # dies without cleaning up: its socket is now stale
            psutil.Process(pid).wait(5)
            with pytest.raises(live.ChannelError, match="stale"):
                live.ask(next((ws / ".mltriage/runs" / frozen).glob("ctl-*.sock")), {"cmd": "progress"})

    run(body)


def test_paths_and_run_ids_outside_the_workspace_are_refused(ws):
    async def body():
        async with inprocess_client(ws) as c:
            r = await c.call_tool("run_training", {"command": [PYTHON, "-c", "pass"], "log_path": "../escape.log"})
            assert r.is_error and "outside" in text_of(r)
            r = await c.call_tool("live_status", {"run": "../../etc", "what": ["progress"]})
            assert r.is_error and "not a run id" in text_of(r)
            r = await c.call_tool("live_status", {"run": "nosuchrun", "what": ["progress"]})
            assert r.is_error and "no run" in text_of(r)
            r = await c.call_tool("inspect_checkpoint", {"path": "/etc/hostname"})
            assert r.is_error and "outside" in text_of(r)
            rid = await _start(c, "normal.py")
            await _until(c, rid, ["progress"], lambda s: _step(s) >= 1)
            r = await c.call_tool("live_action", {"run": rid, "action": "save_checkpoint", "path": "/tmp/x.pt"})
            assert r.is_error and "outside" in text_of(r)
            r = await c.call_tool("live_action", {"run": rid, "action": "eval", "path": "x"})
            assert r.is_error  # not in the allow-list
            # the instrument itself refuses too, whoever talks to its socket
            with pytest.raises(live.ChannelError, match="outside the workspace"):
                live.ask(next((ws / ".mltriage/runs" / rid).glob("ctl-*.sock")),
                         {"cmd": "action", "action": "save_checkpoint", "path": "/tmp/x.pt"})
            with pytest.raises(live.ChannelError, match="unknown command"):
                live.ask(next((ws / ".mltriage/runs" / rid).glob("ctl-*.sock")), {"cmd": "eval", "code": "1"})
            sock = next((ws / ".mltriage/runs" / rid).glob("ctl-*.sock"))
            assert (sock.stat().st_mode & 0o777) == 0o600

    run(body)


def test_a_users_own_sitecustomize_still_runs_beside_the_instrument(ws, tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    marker = ws / "user_sitecustomize_ran"
    (theirs / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    monkeypatch.setenv("PYTHONPATH", str(theirs))

    async def body():
        async with inprocess_client(ws) as c:
            rid = await _start(c, "normal.py", "--steps", "3", "--sleep", "0")
            deadline = time.monotonic() + 40
            while (s := await _status(c, rid, "progress"))["run"]["status"] in ("starting", "running"):
                assert time.monotonic() < deadline
                await anyio.sleep(0.3)
            assert s["run"]["status"] == "finished" and s["progress"][0]["step"] == 3
            assert marker.read_text() == "yes"

    run(body)


def test_torchrun_rank_that_sleeps_is_named_by_ranks(ws):
    async def body():
        async with inprocess_client(ws) as c:
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                port = free.getsockname()[1]
            cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                   "--master-port", str(port), str(FIX / "ddp_sleep.py")]
            r = await c.call_tool("run_training", {"command": cmd, "log_path": "ddp.log"})
            rid = r.structured_content["run"]["id"]
            s = await _until(c, rid, ["ranks"], lambda s: any(f["failure_mode"] == "hang" for f in s["findings"])
                             or s["run"]["status"] not in ("starting", "running"), timeout=60)
            assert s["run"]["status"] == "running", (ws / "ddp.log").read_text()[-3000:]
            f = next(f for f in s["findings"] if f["failure_mode"] == "hang")
            assert f["summary"].startswith("rank 1 ") and f"ddp_sleep.py:{_line_of('ddp_sleep.py', 'time.sleep(3600)')}" in f["location"]
            verdicts = {x["rank"]: x for x in s["ranks"]}
            assert "STRAGGLER" in verdicts[1]["verdict"] and "STRAGGLER" not in verdicts[0]["verdict"]
            assert verdicts[0]["inside_torch"] is True
            r = await c.call_tool("live_action", {"run": rid, "action": "stop", "wait_s": 1})
            assert r.structured_content["applied"] and "SIGTERM" in r.structured_content["note"]
            assert _all_run_processes(ws) == []

    run(body)


def test_py_spy_shows_the_stack_of_a_process_we_did_not_launch(ws):
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        pytest.skip("py-spy is not installed")
    (ws / "sleeper.py").write_text("import time\n\ndef wait_for_ever():\n    time.sleep(600)\n\nwait_for_ever()\n")
    proc = subprocess.Popen([PYTHON, "sleeper.py"], cwd=ws)
    try:
        async def body():
            async with inprocess_client(ws) as c:
                await anyio.sleep(0.5)
                s = await _status(c, f"pid:{proc.pid}", "stack", "memory")
                frames = [f["func"] for t in s["stacks"] for f in t["frames"]]
                assert "wait_for_ever" in frames and s["stacks"][0]["source"] == "py-spy"
                assert "memory" in s["unavailable"]
                outside = await c.call_tool("live_status", {"run": f"pid:{os.getpid()}", "what": ["stack"]})
                assert outside.is_error and "outside the workspace" in text_of(outside)

        run(body)
    finally:
        proc.kill()
        proc.wait()


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_would_run_code_is_refused_not_executed(ws):
    import torch

    marker = ws / "pwned"
    torch.save({"model": {"w": torch.zeros(2)}, "payload": _RunsCode(marker)}, ws / "evil.pt")
    (ws / "evil.pkl").write_bytes(pickle.dumps(_RunsCode(marker)))  # the legacy, non-zip format too

    async def body():
        async with inprocess_client(ws) as c:
            for name in ("evil.pt", "evil.pkl"):
                r = await c.call_tool("inspect_checkpoint", {"path": name})
                assert not r.is_error, text_of(r)
                rep = r.structured_content
                assert rep["loaded"] is False and "run code" in rep["refused_reason"], rep
                assert any("system" in g for g in rep["unsafe_globals"]), rep["unsafe_globals"]
            assert not marker.exists()

    run(body)
    assert not marker.exists()


def test_inspect_checkpoint_names_nan_weights_and_parameters_that_never_changed(ws):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 10, "epoch": 1}, ws / "a.pt")
    with torch.no_grad():
        model[1].weight.add_(1.0)  # only the head moves: layer 0 is frozen by mistake
        model[1].bias[0] = float("nan")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 20, "epoch": 2}, ws / "b.pt")

    async def body():
        async with inprocess_client(ws) as c:
            r = await c.call_tool("inspect_checkpoint", {"path": "b.pt", "compare_to": "a.pt"})
            assert not r.is_error, text_of(r)
            rep = r.structured_content
            assert rep["step"] == 20 and rep["epoch"] == 2 and rep["n_params"] == 4 * 8 + 8 + 8 * 2 + 2
            assert rep["optimizers"][0]["step"] == 1 and rep["optimizers"][0]["groups"][0]["lr"] == 1e-3
            assert [t["name"] for t in rep["nonfinite"]] == ["1.bias"]
            assert set(rep["compare"]["unchanged"]) == {"0.weight", "0.bias"}
            modes = {f["failure_mode"]: f for f in rep["findings"]}
            assert modes["nan_inf"]["location"] == "1.bias"
            assert modes["frozen_params"]["location"] == "0.bias"
            assert "nan" in json.dumps(rep["compare"]["changed"])  # NaN travels as a marker, not as JSON NaN

    run(body)

"""The four evidence tools through a real MCP client over stdio (`python -m server`), bad input included."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, inprocess_client, run, stdio_client, text_of

EVIDENCE_TOOLS = {"tail_log", "log_metrics", "gpu_status", "process_check"}

LOG = "".join(f"step {i} | loss {2.3 - i * 0.01:.4f} | lr 1.0e-03\n" for i in range(100)) + \
      "step 100 | loss nan | lr 1.0e-03\n" + \
      'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    loss.backward()\n' \
      "RuntimeError: Function 'LogBackward0' returned nan values in its 0th output.\n"


@pytest.fixture
def evidence_ws(workspace: Path, tmp_path: Path) -> Path:
    (workspace / "logs").mkdir()
    (workspace / "logs" / "train.log").write_text(LOG)
    (workspace / "ckpt.pt").write_bytes(bytes(range(256)) * 64)
    outside = tmp_path / "outside.log"
    outside.write_text("secret\n")
    (workspace / "escape.log").symlink_to(outside)
    return workspace


async def expect_error(client, tool: str, args: dict, *needles: str) -> str:
    r = await client.call_tool(tool, args)
    assert r.is_error, f"{tool}({args}) should fail: {text_of(r)[:300]}"
    text = text_of(r)
    for n in needles:
        assert n.lower() in text.lower(), f"{n!r} not in {text!r}"
    return text


async def still_serving(client) -> None:
    r = await client.call_tool("tail_log", {"path": "logs/train.log", "lines": 3})
    assert not r.is_error and r.structured_content["lines"][-1].startswith("RuntimeError")


def test_evidence_tools_over_stdio_answer_and_refuse_bad_input_clearly(evidence_ws, tmp_path, no_stray_processes):
    tag = f"mltriage-mcp-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-c", f"# {tag}\nimport time\ntime.sleep(60)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    async def body():
        async with stdio_client(evidence_ws) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert EVIDENCE_TOOLS <= set(tools)
            for name in EVIDENCE_TOOLS:
                assert tools[name].output_schema, f"{name} has no outputSchema"
                assert 80 < len(tools[name].description) <= 320  # for the calling agent, and short (issue 15)

            r = await c.call_tool("tail_log", {"path": "logs/train.log", "lines": 10})
            assert not r.is_error
            kinds = {e["kind"] for e in r.structured_content["events"]}
            assert {"traceback", "nan_inf"} <= kinds and r.structured_content["last_step"] == 100
            assert "RuntimeError" in text_of(r)

            r = await c.call_tool("log_metrics", {"path": "logs/train.log", "names": ["loss"], "plot": True})
            assert not r.is_error
            loss = r.structured_content["series"][0]
            assert loss["nonfinite"] == 1 and loss["last"] == "nan" and loss["first_nonfinite_step"] == 100
            assert r.structured_content["shape"] == "nan_death"
            assert [b.type for b in r.content] == ["text", "image"] and r.content[1].mime_type == "image/png"

            r = await c.call_tool("gpu_status", {})
            assert not r.is_error and "available" in r.structured_content

            while tag not in " ".join(psutil.Process(proc.pid).cmdline()):
                time.sleep(0.02)
            r = await c.call_tool("process_check", {"pattern": tag})
            assert not r.is_error
            (p,) = r.structured_content["processes"]
            assert p["pid"] == proc.pid and p["verdict"] == "possibly_hung"

            for tool in ("tail_log", "log_metrics"):
                await expect_error(c, tool, {"path": "logs/missing.log"}, "does not exist", "relative to the workspace")
                await still_serving(c)
                await expect_error(c, tool, {"path": "logs"}, "is a directory", "file inside")
                await expect_error(c, tool, {"path": "ckpt.pt"}, "binary", "text log")
                await expect_error(c, tool, {"path": "../outside.log"}, "outside", "inside the workspace")
                await expect_error(c, tool, {"path": str(tmp_path / "outside.log")}, "outside", "--allow-read")
                await expect_error(c, tool, {"path": "escape.log"}, "outside", "inside the workspace")
                await expect_error(c, tool, {"path": ""}, "empty path")
                await still_serving(c)
            await expect_error(c, "tail_log", {"path": "logs/train.log", "lines": 0}, "lines")
            await expect_error(c, "process_check", {"pid": gone.pid}, f"no process with pid {gone.pid}", "pattern")
            await expect_error(c, "process_check", {"pid": -5}, "pid")
            await still_serving(c)

    try:
        run(body)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: chmod 000 does not deny root reads, so this case cannot be set up")
def test_unreadable_log_is_refused_over_stdio(evidence_ws):
    p = evidence_ws / "logs" / "locked.log"
    p.write_text("step 1\n")
    p.chmod(0)

    async def body():
        async with stdio_client(evidence_ws) as c:
            await expect_error(c, "tail_log", {"path": "logs/locked.log"}, "permission denied", "permissions")
            await expect_error(c, "log_metrics", {"path": "logs/locked.log"}, "permission denied", "permissions")
            await still_serving(c)

    run(body)


def test_permission_error_while_opening_becomes_a_clear_tool_error(evidence_ws, monkeypatch):
    """The race the workspace check cannot see (readable at check, denied at open), also for root."""
    import tools.logs as logs

    real_open = os.open

    def denied(path, *a, **kw):
        if str(path).endswith("train.log"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(logs.os, "open", denied)
    monkeypatch.setattr("builtins.open", lambda p, *a, **kw: denied(p) if str(p).endswith("train.log") else open(p, *a, **kw))

    async def body():
        async with inprocess_client(evidence_ws) as c:
            for tool in ("tail_log", "log_metrics"):
                await expect_error(c, tool, {"path": "logs/train.log"}, "permission denied", "permissions")

    run(body)


def test_gpu_status_over_stdio_with_a_fake_nvml(workspace, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\nimport fake_pynvml\nsys.modules[__name__] = fake_pynvml\n")

    async def body():
        async with stdio_client(workspace, env={"PYTHONPATH": f"{shim}{os.pathsep}{ROOT}"}) as c:
            r = await c.call_tool("gpu_status", {})
            assert not r.is_error
            s = r.structured_content
            assert s["available"] and s["source"] == "nvml" and len(s["gpus"]) == 2
            assert s["gpus"][0]["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
            assert s["gpus"][1]["power_draw_w"] is None  # NVMLError_NotSupported on the wire is null
            server_proc = s["gpus"][0]["processes"][0]
            assert "server" in server_proc["cmdline"]  # the fake puts the server's own pid on GPU 0
            assert "A100" in text_of(r)

    run(body)


def test_a_log_big_enough_for_scan_workers_gets_the_in_process_answer_over_stdio(workspace, monkeypatch,
                                                                                 no_stray_processes):
    """Over 16 MB, log_metrics may start scan workers from a thread of the real server (fd 0/1 diverted):
    the answer is the one the in-process parser gives, and no worker or spool file outlives the call."""
    from tools import logs

    lines = [f"it {i} loss={2.5 - i / 200000:.5f} acc={i / 400000:.4f}" + (" | val_loss 1.9" if i % 1000 == 0 else "")
             for i in range(520000)]
    p = workspace / "big.log"
    p.write_text("\n".join(lines) + "\nit 520000 loss=nan acc=0.5\n")
    assert p.stat().st_size > logs._PARALLEL_MIN
    monkeypatch.setattr(logs, "_PARALLEL_MIN", 1 << 62)
    expected = logs.log_metrics(p).model_dump(mode="json")
    spools = lambda: {d.name for d in Path("/dev/shm").glob("mltriage-scan-*")} if Path("/dev/shm").is_dir() else set()  # noqa: E731
    before = spools()

    async def body():
        async with stdio_client(workspace) as client:
            # detail="full": the comparison is to the parser's exact numbers (the default summary rounds them)
            r = await client.call_tool("log_metrics", {"path": "big.log", "detail": "full"})
            assert not r.is_error, text_of(r)
            return r.structured_content

    got = run(body)
    assert got["series"] == expected["series"] and got["shape"] == expected["shape"]
    assert got["findings"] == expected["findings"]
    assert spools() == before


def test_a_pretraining_phase_in_the_log_stays_apart_over_stdio(evidence_ws):
    """log_metrics and compare_runs as the agent calls them: a script that pre-trains before it fine-tunes logs
    `[pretrain] ... loss` lines first; the run's `loss` is the fine-tune's, the pre-training its own series."""
    (evidence_ws / "logs").mkdir(exist_ok=True)
    pre = "".join(f"[pretrain] epoch {e}/4 loss {v}\n" for e, v in enumerate((0.99, 0.24, 0.12, 0.09), 1))
    for name, end in (("a.log", 0.75), ("b.log", 0.60)):
        (evidence_ws / "logs" / name).write_text(pre + "".join(
            f"{{'loss': {1.9 - (1.9 - end) * i / 4:.4f}, 'eval_loss': {1.7 - (1.7 - end) * i / 4:.4f}, 'epoch': {i + 1}}}\n"
            for i in range(5)))

    async def body():
        async with stdio_client(evidence_ws) as c:
            r = await c.call_tool("log_metrics", {"path": "logs/a.log"})
            assert not r.is_error, text_of(r)
            s = r.structured_content
            series = {x["name"]: x for x in s["series"]}
            assert s["loss_series"] == "loss" and series["loss"]["first"] == 1.9 and series["loss"]["min"] == 0.75
            assert series["pretrain:loss"]["count"] == 4
            r = await c.call_tool("compare_runs", {"before": "logs/a.log", "after": "logs/b.log", "metric": "loss"})
            assert not r.is_error and "0.6" in text_of(r), text_of(r)
            await expect_error(c, "log_metrics", {"path": "logs/missing.log"}, "missing.log")
            await still_serving(c)

    run(body)

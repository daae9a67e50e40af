"""Distributed jobs on CPU (gloo, 4 ranks under torchrun): the rank that skipped an all_reduce is named from every
rank's stack and from torch's flight recorder, over a real MCP client on stdio; a rank with slow data loading (3 ranks) is
named live with its ratio to the median. Every test kills what it started."""

import os
import pickle
import socket
import time
from pathlib import Path

import anyio
import psutil
import pytest

from conftest import PYTHON, inprocess_client, run, stdio_client
from test_live import _all_run_processes
from tools.flight_recorder import analyse_dumps, shape
from tools.hang_stacks import RankStack, analyse
from tools.live import Frame

FIX = Path(__file__).resolve().parent / "fixtures" / "dist"
LIB = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _line_of(script: str, text: str) -> int:
    return next(i for i, line in enumerate((FIX / script).read_text().splitlines(), 1) if text in line)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(script: Path, nproc: int = 4) -> list[str]:
    return [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
            "--master-port", str(_free_port()), str(script)]


def _kill_runs(workspace: Path) -> None:
    """Whatever a run of this workspace left (torchrun puts each worker in a session of its own)."""
    family = _all_run_processes(workspace)
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(family, timeout=10)


def _spy() -> None:
    if not (Path(PYTHON).parent / "py-spy").exists():
        pytest.skip("py-spy is not installed (the dev extra has it)")


def test_rank_that_skips_an_all_reduce_is_named_from_stacks_and_flight_recorder(workspace):
    """One job under run_training: process_check compares the ranks' py-spy stacks and reads the dumps the job
    wrote to TORCH_FR_DUMP_TEMP_FILE; live_status(ranks) has every rank dump its flight recorder through the
    instrument's control socket (gloo never writes one by itself) and reads those."""
    _spy()
    prefix = workspace / "fr" / "trace_rank_"
    prefix.parent.mkdir()
    env = {"TORCH_FR_BUFFER_SIZE": "200", "TORCH_FR_DUMP_TEMP_FILE": str(prefix), "DUMP_FR_AFTER_S": "1",
           "OMP_NUM_THREADS": "1"}

    async def body():
        async with stdio_client(workspace, env=env) as c:
            r = await c.call_tool("run_training", {"command": _torchrun(FIX / "skip_all_reduce.py"), "log_path": "j.log"})
            rid, leader = r.structured_content["run"]["id"], r.structured_content["run"]["pid"]
            try:
                deadline = time.monotonic() + 90
                while not all(Path(f"{prefix}{r}").exists() for r in range(4)):
                    assert time.monotonic() < deadline, (workspace / "j.log").read_text()[-3000:]
                    await anyio.sleep(0.3)
                r = await c.call_tool("process_check", {"pid": leader, "stack": True})
                assert not r.is_error, r
                s = await c.call_tool("live_status", {"run": rid, "what": ["ranks"]})
                assert not s.is_error, s
                return r.structured_content, s.structured_content
            finally:
                await c.call_tool("live_action", {"run": rid, "action": "stop", "wait_s": 1})

    try:
        rep, status = run(body)
    finally:
        _kill_runs(workspace)
    barrier = f"skip_all_reduce.py:{_line_of('skip_all_reduce.py', 'dist.barrier()')}"
    all_reduce = f"skip_all_reduce.py:{_line_of('skip_all_reduce.py', 'dist.all_reduce(grad)')}"
    [h] = rep["jobs"]
    assert h["ranks_seen"] == [0, 1, 2, 3]
    odd = h["odd"]
    assert (odd["rank"], odd["kind"], odd["collective"], odd["majority_collective"]) == \
        (3, "different_collective", "barrier", "all_reduce")
    assert barrier in odd["where"] and all_reduce in odd["majority_where"] and odd["majority_ranks"] == [0, 1, 2]
    stack_finding = next(f for f in rep["findings"] if f["summary"].startswith("rank 3 "))
    assert stack_finding["failure_mode"] == "hang" and stack_finding["location"].endswith(barrier)
    # torch's analyser on the same job's dumps: the third collective is where rank 3 parts from the others
    [fr] = rep["flight_recorder"]
    assert fr["analysed"] and fr["matched"] == 2, (fr["why_not"], fr["missing_files"])
    m = fr["mismatches"][0]
    assert (m["seq"], m["op"], m["input_sizes"], m["ranks"], m["odd_ranks"]) == (3, "gloo:all_reduce", [[16]], [0, 1, 2], [3])
    assert m["other"] == {"gloo:barrier []": [3]}
    fr_finding = next(f for f in rep["findings"] if f["summary"].startswith("flight recorder"))
    assert "#3" in fr_finding["summary"] and fr_finding["location"].endswith(barrier)
    assert odd["pid"] in {c["pid"] for c in rep["processes"][0]["children"]}  # a worker of the launcher we passed
    live_fr = status["flight_recorder"]  # dumped through the control sockets, read by the same analyser
    assert live_fr["files"]["3"].endswith("/fr/rank_3") and live_fr["mismatches"][0]["odd_ranks"] == [3], live_fr
    assert status["findings"][0]["summary"].startswith("flight recorder: collective #3")


def test_flight_recorder_dump_that_would_run_code_is_refused(workspace):
    class RunsCode:
        def __reduce__(self):
            return (os.system, (f"touch {workspace / 'pwned'}",))

    planted = workspace / "trace_rank_0"
    planted.write_bytes(pickle.dumps({"version": "2.10", "entries": [RunsCode()], "pg_config": {}}))
    fr = anyio.run(lambda: analyse_dumps({0: planted}, workspace_root=workspace, python=PYTHON))
    assert not fr.analysed and "refusing posix.system" in fr.why_not and not (workspace / "pwned").exists()


def _stack(rank, *frames, **locals_) -> RankStack:
    return RankStack(rank=rank, pid=100 + rank, frames=[
        Frame(file=f, line=l, func=fn, locals={k: str(v) for k, v in locals_.items()} if "train" in f else None)
        for f, l, fn in frames])


def test_rank_not_in_any_collective_is_the_odd_one():
    waiting = [(LIB, 3252, "all_reduce"), ("/w/train.py", 30, "step")]
    saving = [("/usr/lib/python3.11/pickle.py", 500, "dump"), ("/w/train.py", 41, "save_checkpoint")]
    h = analyse("job", [_stack(0, *saving), _stack(1, *waiting), _stack(2, *waiting), _stack(3, *waiting)])
    assert (h.odd.rank, h.odd.kind, h.odd.collective) == (0, "not_in_collective", None)
    two = analyse("job", [_stack(0, *waiting), _stack(1, *saving)])  # a tie: the one outside the collective
    assert (two.odd.rank, two.odd.kind) == (1, "not_in_collective")


def test_same_stack_one_iteration_ahead_is_named_by_its_loop_counter():
    frames = [(LIB, 3252, "all_reduce"), ("/w/train.py", 30, "train")]
    h = analyse("job", [_stack(0, *frames, step=7), _stack(1, *frames, step=7), _stack(2, *frames, step=8),
                        _stack(3, *frames, step=7)])
    assert (h.odd.rank, h.odd.kind) == (2, "different_call_count")
    assert h.odd.differing_locals == {"train.step": "rank 2: 8; others: 7"}
    same = analyse("job", [_stack(r, *frames, step=7) for r in range(4)])
    assert same.odd is None and "flight recorder" in same.note


def test_flight_recorder_rank_that_issued_fewer_collectives_is_behind():
    last = {str(r): {"entries": 4, "pg_status": {"0": {"last_enqueued_collective": 4 if r != 1 else 3}},
                     "last_op": "gloo:all_reduce", "last_frames": ["/w/train.py:9 in train"]} for r in range(4)}
    fr = shape({"available": True, "last": last, "mismatches": [], "matched": 3})
    assert fr.behind == [1]


def test_straggler_with_injected_sleep_is_named_with_its_ratio(workspace):
    async def body():
        async with inprocess_client(workspace) as c:
            r = await c.call_tool("run_training", {"command": _torchrun(FIX / "straggler.py", 3), "log_path": "s.log"})
            rid = r.structured_content["run"]["id"]
            try:
                deadline = time.monotonic() + 90
                while True:
                    s = (await c.call_tool("live_status", {"run": rid, "what": ["progress"]})).structured_content
                    assert s["run"]["status"] in ("starting", "running"), (workspace / "s.log").read_text()[-3000:]
                    if len(s["progress"]) == 3 and min(p["step"] for p in s["progress"]) >= 8:
                        break
                    assert time.monotonic() < deadline
                    await anyio.sleep(0.5)
                return (await c.call_tool("live_status", {"run": rid, "what": ["ranks"]})).structured_content
            finally:
                await c.call_tool("live_action", {"run": rid, "action": "stop", "wait_s": 1})

    try:
        s = run(body)
    finally:
        _kill_runs(workspace)
    f = next(f for f in s["findings"] if f["failure_mode"] == "slow_throughput")
    assert f["location"] == "rank 2" and "waiting for data" in f["summary"], f
    timing = {t["rank"]: t for t in s["rank_timing"]}
    injected = 3.0  # straggler.py: rank 2 sleeps 3x as long per sample as the others
    assert abs(timing[2]["ratio_to_median"] / injected - 1) <= 0.2, timing
    assert all(abs(timing[r]["ratio_to_median"] - 1) < 0.2 for r in (0, 1)), timing
    assert timing[2]["data_ms"] > 2 * timing[0]["data_ms"] and timing[0]["rss_mib"] > 0

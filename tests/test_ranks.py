"""Many rank logs as one run (issue 18): the culprit rank apart from its victims, odd ranks, stragglers.

Two gallery jobs run for real (torchrun, gloo, 4 CPU ranks, side by side); the layouts are checked on log trees
written here the way torchrun, Slurm and hand-rolled per-rank logging write them.
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, run, stdio_client, text_of
from tools.errors import TriageError
from tools.ranks import analyse_ranks, is_rank_spec, rank_files, tail_ranks
from tools.static_scan import static_scan
from tools.workspace import Workspace

GALLERY = ROOT / "examples" / "distributed"
sys.path.insert(0, str(GALLERY))
import generate  # noqa: E402  the gallery's own runner

PEER = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
        "peer [127.0.0.1]:12710. This is typically caused by a remote worker crashing.")
GLOO_TIMEOUT = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                "waiting 5000ms for recv operation to complete")
WATCHDOG = ("[rank{r}]:[E1125 19:40:{s:02d}.123456789 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=1042, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
            "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")


def traceback(rank: int, last: str, frame: str = 'File "/job/train.py", line 41, in main') -> str:
    return "\n".join(f"[rank{rank}]: {x}" for x in [
        "Traceback (most recent call last):", '  File "/job/train.py", line 60, in <module>', "    main()",
        f"  {frame}", "    loss = F.cross_entropy(model(x), y)", last]) + "\n"


def steps(n: int, t0: str = "2026-11-25 19:30", loss: float = 0.5, extra: str = "") -> str:
    return "".join(f"{t0}:{i % 60:02d},000 INFO step {i} loss {loss:.4f}{extra}\n" for i in range(n))


def write(path: Path, text: str, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def error_json(path: Path, message: str, ts: int) -> None:
    write(path, json.dumps({"message": {"message": message, "extraInfo": {
        "py_callstack": f'Traceback (most recent call last):\n  File "/job/train.py", line 41, in main\n{message}\n',
        "timestamp": str(ts)}}}))


def torchrun_tree(root: Path, culprit: int = 2) -> Path:
    """torchrun --log-dir: the culprit raised, two ranks lost their peer, one was stopped by the launcher silently."""
    att = root / "logs" / "4f1c_abcd" / "attempt_0"
    for r in range(4):
        body = steps(6)
        if r == culprit:
            body += traceback(r, "IndexError: Target 4 is out of bounds.")
            error_json(att / str(r) / "error.json", "IndexError: Target 4 is out of bounds.", 1795635490)
        elif r != 0:
            body += traceback(r, PEER, 'File "/venv/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce')
            error_json(att / str(r) / "error.json", PEER, 1795635490)
        write(att / str(r) / "stderr.log", body)
        write(att / str(r) / "stdout.log", "")
    return root / "logs"


def test_torchrun_tree_names_the_raising_rank_as_culprit_and_the_rest_as_victims(tmp_path):
    rep = analyse_ranks(Workspace(tmp_path).walk(torchrun_tree(tmp_path)), "logs", tmp_path)
    assert rep.culprit_rank == 2 and rep.victims == [0, 1, 3]
    f = rep.findings[0]
    assert f.failure_mode == "exception" and "rank 2" in f.summary and "victims" in f.summary
    assert f.location == "rank 2: /job/train.py:41 in main"  # the user's frame, not torch's
    roles = {s.rank: s.role for s in rep.ranks}
    assert roles == {0: "victim", 1: "victim", 2: "culprit", 3: "victim"}


def test_an_older_torchrun_attempt_is_left_out(tmp_path):
    logs = torchrun_tree(tmp_path)
    old = logs / "4f1c_abcd" / "attempt_0"
    old.rename(logs / "4f1c_abcd" / "attempt_1")
    write(logs / "4f1c_abcd" / "attempt_0" / "1" / "stderr.log", traceback(1, "ValueError: an old failure"))
    rep = analyse_ranks(Workspace(tmp_path).walk(logs), "logs", tmp_path)
    assert rep.culprit_rank == 2 and any("earlier torchrun attempts" in n for n in rep.notes)


def test_slurm_outputs_with_nccl_watchdog_timeouts_blame_the_rank_that_ran_out_of_memory(tmp_path):
    logs = tmp_path / "slurm"
    for r in range(4):
        body = steps(10, extra=" step_time 0.41")
        if r == 2:
            body += "2026-11-25 19:30:12,500 ERROR rank 2 failed\n" + traceback(
                r, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        else:
            body += WATCHDOG.format(r=r, s=20 + r) + "\n" + "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        write(logs / f"slurm-4242_{r}.out", body)
    rep = analyse_ranks(Workspace(tmp_path).walk(logs), "slurm", tmp_path)
    assert rep.culprit_rank == 2 and rep.victims == [0, 1, 3]
    assert rep.findings[0].failure_mode == "oom"
    assert {s.why for s in rep.ranks if s.role == "victim"} == {"collective/watchdog timeout"}


def test_two_ranks_with_errors_of_their_own_the_earliest_by_timestamp_is_the_culprit(tmp_path):
    for r, minute in ((0, "19:31"), (1, "19:30"), (2, "19:32"), (3, "19:33")):
        body = steps(4) + f"2026-11-25 {minute}:59,000 ERROR failing\n"
        if r in (1, 3):
            body += traceback(r, "ValueError: loss is nan")
        else:
            body += GLOO_TIMEOUT + "\n"
        write(tmp_path / "runs" / f"job.rank{r}.log", body)
    rep = analyse_ranks(rank_files(Workspace(tmp_path), "runs/*.rank*.log"), "runs/*.rank*.log", tmp_path)
    assert rep.culprit_rank == 1 and rep.culprit_basis == "earliest log timestamp"
    assert {s.rank: s.role for s in rep.ranks} == {0: "victim", 1: "culprit", 2: "victim", 3: "also_failed"}
    assert rep.findings[0].failure_mode == "nan_inf"


def test_without_timestamps_the_first_rank_to_stop_writing_is_the_culprit(tmp_path):
    now = time.time()
    for r, late in ((0, 9), (1, 0), (2, 7)):
        write(tmp_path / f"rank{r}.log", "step 3 loss 0.2\n" + traceback(r, "RuntimeError: CUDA error: an illegal memory access"),
              mtime=now - 100 + late)
    rep = analyse_ranks(rank_files(Workspace(tmp_path), "rank*.log"), "rank*.log", tmp_path)
    assert rep.culprit_rank == 1 and "mtime" in rep.culprit_basis


def test_one_console_log_with_rank_prefixes_is_split_by_rank_and_read_in_write_order(tmp_path):
    """`srun --label` output (`<task>: ` prefixes): rank 3 fails first, rank 1 later with its own error, the others
    lose their peers; no timestamps on the failure lines, so the order of the lines in the file decides."""
    lines = [f"{r}: step {i} loss 0.5" for i in range(5) for r in range(4)]
    lines += [f"3: {x}" for x in traceback(3, "KeyError: 'input_ids'").replace("[rank3]: ", "").splitlines()]
    lines += [f"1: {x}" for x in traceback(1, "ValueError: loss is nan").replace("[rank1]: ", "").splitlines()]
    lines += [f"{r}: {PEER}" for r in (0, 2)]
    write(tmp_path / "job.out", "srun: job 4242 queued\n" + "\n".join(lines) + "\n")
    rep = analyse_ranks(rank_files(Workspace(tmp_path), "*.out"), "*.out", tmp_path)
    assert rep.n_ranks == 4 and rep.culprit_rank == 3 and rep.culprit_basis == "first error in the shared console log"
    assert {s.rank: s.role for s in rep.ranks} == {0: "victim", 1: "also_failed", 2: "victim", 3: "culprit"}


def test_a_rank_whose_step_counter_ends_elsewhere_is_the_odd_one_in_a_hang(tmp_path):
    for r in range(4):
        last = 9 if r == 3 else 8
        body = "".join(f"2026-11-25 19:30:{i:02d},000 INFO step {i} loss 0.5 collectives {2 * (i + 1)}\n" for i in range(last + 1))
        body += "" if r == 3 else traceback(r, GLOO_TIMEOUT)
        write(tmp_path / "logs" / f"rank_{r}.log", body)
    rep = analyse_ranks(Workspace(tmp_path).walk(tmp_path / "logs"), "logs", tmp_path)
    assert rep.culprit_rank is None and rep.odd_ranks == [3] and rep.victims == [0, 1, 2]
    assert rep.findings[0].failure_mode == "hang" and rep.findings[0].location.startswith("rank 3")


def test_a_silent_stuck_job_names_the_rank_that_stopped_at_another_step(tmp_path):
    old = time.time() - 900  # nobody wrote for 15 minutes, nobody raised: a job stuck in a collective
    for r in range(4):
        write(tmp_path / f"rank{r}.log", steps(48 if r == 2 else 51), mtime=old)
    rep = analyse_ranks(rank_files(Workspace(tmp_path), "rank*.log"), "rank*.log", tmp_path)
    assert rep.odd_ranks == [2] and rep.culprit_rank is None
    f = rep.findings[0]
    assert f.failure_mode == "hang" and f.location == "rank 2" and f.confidence >= 0.5


def test_a_rank_killed_by_the_kernel_is_an_out_of_memory_culprit(tmp_path):
    write(tmp_path / "rank0.log", steps(5) + "/var/spool/slurmd/job4242/slurm_script: line 12:  3141 Killed  python train.py\n",
          mtime=time.time() - 60)
    for r in (1, 2):
        write(tmp_path / f"rank{r}.log", steps(5) + WATCHDOG.format(r=r, s=30) + "\n")
    rep = analyse_ranks(rank_files(Workspace(tmp_path), "rank*.log"), "rank*.log", tmp_path)
    assert rep.culprit_rank == 0 and rep.victims == [1, 2] and rep.findings[0].failure_mode == "oom"


def test_a_rank_with_a_nan_loss_among_finite_ones_is_named(tmp_path):
    for r in range(4):
        write(tmp_path / f"rank{r}.log", steps(20, loss=float("nan") if r == 1 else 0.7))
    rep = analyse_ranks(rank_files(Workspace(tmp_path), "rank*.log"), "rank*.log", tmp_path)
    assert rep.diverging_ranks == [1]
    assert any(f.failure_mode == "nan_inf" and f.location == "rank 1" for f in rep.findings)


def test_a_glob_does_not_read_through_a_link_out_of_the_workspace(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    write(outside / "rank9.log", traceback(9, "ValueError: secret"))
    write(ws / "logs" / "rank0.log", steps(3))
    (ws / "logs" / "rank9.log").symlink_to(outside / "rank9.log")
    w = Workspace(ws)
    assert is_rank_spec(w, "logs") and is_rank_spec(w, "logs/rank*.log") and not is_rank_spec(w, "logs/rank0.log")
    assert [p.name for p in rank_files(w, "logs/rank*.log")] == ["rank0.log"]
    assert [p.name for p in rank_files(w, "logs")] == ["rank0.log"]
    with pytest.raises(TriageError, match="matches no readable file"):
        rank_files(w, "logs/*.out")
    with pytest.raises(TriageError, match="outside"):  # the glob's directory is confined before anything is listed
        rank_files(w, "../outside/*.log")


def test_static_scan_names_the_sampler_without_set_epoch_and_the_unsynced_batchnorm():
    for name, rule in (("sampler_no_set_epoch", "sampler_without_set_epoch"), ("bn_no_sync", "batchnorm_without_sync")):
        meta = json.loads((GALLERY / name / "example.json").read_text())
        hits = [i for i in static_scan([GALLERY / name / "train.py"]).issues if i.rule == rule]
        assert [i.line for i in hits] == [meta["bug_line"]] and hits[0].failure_mode == meta["failure_mode"], name
    # the healthy twins: set_epoch called, SyncBatchNorm used
    for name in ("straggler", "crash_one_rank", "skip_allreduce"):
        assert not [i for i in static_scan([GALLERY / name / "train.py"]).issues
                    if i.rule in ("sampler_without_set_epoch", "batchnorm_without_sync")]


def test_real_jobs_a_raising_rank_is_the_culprit_and_a_straggler_is_named_with_its_ratio(tmp_path, no_stray_processes):
    """Two 4-rank torchrun jobs side by side: (a) rank 2 raises, the others time out; (c) rank 1 works 3x longer."""
    out, results = tmp_path / "gallery", {}
    jobs = [("crash_one_rank", ["--timeout", "3", "--steps", "8"]), ("straggler", ["--steps", "8"])]
    threads = [threading.Thread(target=lambda n=n, a=a: results.__setitem__(n, generate.run(n, out, 150, a)))
               for n, a in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    crash = json.loads((GALLERY / "crash_one_rank" / "example.json").read_text())
    rep = tail_ranks(rank_files(Workspace(tmp_path), "gallery/crash_one_rank"), 20, "gallery/crash_one_rank", tmp_path)
    assert rep.ranks.culprit_rank == crash["culprit_rank"], (results, rep.ranks.text())
    assert crash["culprit_rank"] not in rep.ranks.victims and set(rep.ranks.victims) == set(crash["victims"])
    assert rep.findings[0].location.endswith(f"train.py:{crash['error_line']} in main")
    assert "Target 4 is out of bounds" in "\n".join(rep.lines)  # the culprit's own lines are shown

    slow = json.loads((GALLERY / "straggler" / "example.json").read_text())
    srep = analyse_ranks(Workspace(tmp_path).walk(out / "straggler"), "straggler", tmp_path)
    assert srep.straggler_rank == slow["straggler_rank"], (results, srep.text())
    assert abs(srep.straggler_ratio / slow["straggler_ratio"] - 1) <= 0.2
    assert any(f.failure_mode == "slow_throughput" for f in srep.findings)


def test_tail_log_and_triage_over_stdio_take_a_rank_log_directory(tmp_path):
    ws = tmp_path / "ws"
    torchrun_tree(ws)

    async def body():
        async with stdio_client(ws) as c:
            r = await c.call_tool("tail_log", {"path": "logs", "lines": 5})
            assert not r.is_error, text_of(r)
            ranks = r.structured_content["ranks"]
            assert ranks["culprit_rank"] == 2 and ranks["victims"] == [0, 1, 3]
            assert "rank 2 failed first" in text_of(r)
            r = await c.call_tool("triage", {"log_path": "logs/*/attempt_0/*/stderr.log", "budget_s": 30})
            assert not r.is_error, text_of(r)
            top = r.structured_content["findings"][0]
            assert top["failure_mode"] == "exception" and top["location"].startswith("rank 2")
            r = await c.call_tool("log_metrics", {"path": "logs"})
            assert not r.is_error and r.structured_content["ranks"]["n_ranks"] == 4, text_of(r)

    run(body)

"""Rank logs as one run: time to the culprit rank on a big job, and accuracy on the distributed gallery.

    python benchmarks/rank_logs.py                  # 512 sparse rank logs of 100 MB, then the gallery (real torchrun)
    python benchmarks/rank_logs.py --ranks 64 --no-gallery

(a) 512 torchrun-layout rank logs (`attempt_0/<rank>/stderr.log`), each 100 MB as a sparse file: a few lines at
    the start, a hole, and real text at the end (200 step lines, then the culprit's traceback or a victim's gloo
    timeout / NCCL watchdog line, timestamped after the culprit's). Measured: analyse_ranks (discovery, bounded tail
    reads, the verdict), median of 3, against `tail -q -n 50` over the same files in the same run (the cheapest
    way a person reads the ends of 512 logs) and against the 2 s target.
(b) every job of examples/distributed run for real (torchrun, gloo, 4 CPU ranks): the culprit, odd and straggler
    rank named as example.json says (the straggler's ratio within 20%), and the static rule of the two jobs that a
    log cannot show.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "distributed"))

from tools.ranks import analyse_ranks  # noqa: E402
from tools.static_scan import static_scan  # noqa: E402
from tools.workspace import walk  # noqa: E402

MB = 1 << 20
TRACE = """[rank{r}]: Traceback (most recent call last):
[rank{r}]:   File "/job/train.py", line 212, in <module>
[rank{r}]:     main()
[rank{r}]:   File "/job/train.py", line 187, in main
[rank{r}]:     loss = criterion(model(x), y)
[rank{r}]: {last}
"""
OWN = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
TIMEOUT = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
           "waiting 600000ms for recv operation to complete")
WATCHDOG = ("[rank{r}]:[E1125 10:{m:02d}:{s:02d}.123456789 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=88211, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
            "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")


def make_tree(root: Path, ranks: int, size_mb: int, culprit: int) -> Path:
    logs = root / "logs" / "0d1f_x" / "attempt_0"
    head = "".join(f"2026-11-25 09:00:0{i},000 INFO starting rank, config line {i}\n" for i in range(5))
    for r in range(ranks):
        d = logs / str(r)
        d.mkdir(parents=True)
        tail = "".join(f"2026-11-25 10:{i // 60:02d}:{i % 60:02d},{r % 1000:03d} INFO step {88000 + i} loss "
                       f"{2.1 - i * 1e-3:.4f} step_time {0.41 + (r % 7) * 1e-3:.3f}\n" for i in range(200))
        if r == culprit:
            tail += "2026-11-25 10:03:20,500 ERROR batch failed\n" + TRACE.format(r=r, last=OWN)
        elif r % 2:
            tail += f"2026-11-25 10:13:{20 + r % 30:02d},000 ERROR collective failed\n" + TRACE.format(r=r, last=TIMEOUT)
        else:
            tail += WATCHDOG.format(r=r, m=13, s=20 + r % 30) + "\n"
        f = d / "stderr.log"
        with open(f, "wb") as fh:
            fh.write(head.encode())
            fh.truncate(size_mb * MB - len(tail))  # a hole: the file is 100 MB, the disk holds a few KB
            fh.seek(0, os.SEEK_END)
            fh.write(tail.encode())
        (d / "stdout.log").touch()
    return root / "logs"


def bench_big(ranks: int, size_mb: int) -> list[tuple]:
    with tempfile.TemporaryDirectory() as tmp:
        culprit = random.Random(18).randrange(ranks)
        logs = make_tree(Path(tmp), ranks, size_mb, culprit)
        files = sorted(str(p) for p in logs.rglob("stderr.log"))
        ours, cpu, ref, got = [], [], [], None
        for _ in range(3):
            t, c = time.perf_counter(), time.process_time()
            rep = analyse_ranks(walk(logs), "logs", Path(tmp))
            ours.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            got = rep
            t = time.perf_counter()
            subprocess.run(["tail", "-q", "-n", "50", *files], stdout=subprocess.DEVNULL, check=True)
            ref.append(time.perf_counter() - t)
        o, r = statistics.median(ours), statistics.median(ref)
        total_gb = ranks * size_mb / 1024
        return [(f"{ranks} rank logs x {size_mb} MB ({total_gb:.0f} GB, sparse): time to the culprit", f"{o:.2f} s wall ({statistics.median(cpu):.2f} s CPU)",
                 f"`tail -n 50` all: {r:.2f} s", f"{o / r:.2f}x", "<= 2 s: " + ("met" if o <= 2 else "MISSED")),
                ("culprit named", f"rank {got.culprit_rank}", f"injected: rank {culprit}", "",
                 "ok" if got.culprit_rank == culprit else "WRONG"),
                ("victims named", str(len(got.victims)), f"expected {ranks - 1}", "",
                 "ok" if len(got.victims) == ranks - 1 else "WRONG")]


def bench_gallery() -> list[tuple]:
    import generate

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in generate.examples():
            meta = json.loads((generate.HERE / name / "example.json").read_text())
            if "static_rule" in meta:
                rules = {i.rule for i in static_scan([generate.HERE / name / "train.py"]).issues}
                ok = meta["static_rule"] in rules
                rows.append((name, f"static_scan: {meta['static_rule'] if ok else sorted(rules)}",
                             f"expected {meta['static_rule']}", "", "ok" if ok else "WRONG"))
                continue
            res = generate.run(name, Path(tmp))
            rep = analyse_ranks(walk(Path(res["logs"])), name, Path(tmp))
            if "culprit_rank" in meta:
                got, want, ok = rep.culprit_rank, meta["culprit_rank"], rep.culprit_rank == meta["culprit_rank"] \
                    and sorted(rep.victims) == sorted(meta["victims"])
                rows.append((name, f"culprit {got}, victims {rep.victims}", f"culprit {want}, victims {meta['victims']}",
                             f"{res['seconds']} s", "ok" if ok else "WRONG"))
            elif "odd_rank" in meta:
                ok = rep.odd_ranks == [meta["odd_rank"]] and rep.culprit_rank is None
                rows.append((name, f"odd {rep.odd_ranks}, culprit {rep.culprit_rank}", f"odd [{meta['odd_rank']}]",
                             f"{res['seconds']} s", "ok" if ok else "WRONG"))
            elif "straggler_rank" in meta:
                ratio = rep.straggler_ratio or 0.0
                ok = rep.straggler_rank == meta["straggler_rank"] and abs(ratio / meta["straggler_ratio"] - 1) <= 0.2
                rows.append((name, f"straggler {rep.straggler_rank}, {ratio:.2f}x ({rep.straggler_field})",
                             f"rank {meta['straggler_rank']}, {meta['straggler_ratio']}x", f"{res['seconds']} s",
                             "ok" if ok else "WRONG"))
    right = sum(r[-1] == "ok" for r in rows)
    rows.append(("gallery accuracy", f"{right}/{len(rows)}", "target: all", "", "met" if right == len(rows) else "MISSED"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--no-gallery", action="store_true")
    a = ap.parse_args()
    rows = bench_big(a.ranks, a.size_mb)
    if not a.no_gallery:
        rows += bench_gallery()
    print("| case | measured | reference | ratio | verdict |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")


if __name__ == "__main__":
    main()

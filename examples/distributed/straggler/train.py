"""4 ranks (gloo, CPU), DDP: rank 1 spends 3x as long per step as the others before its backward (an injected
sleep standing in for a slow host or a heavy data shard). Every rank's step takes as long as rank 1's, because DDP's
all_reduce waits for it; the per-rank compute time (before the backward) shows who is slow.

The work is a sleep, not arithmetic, so that a CPU shared by four ranks does not blur the injected ratio.
"""

import argparse
import logging
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORK_S = 0.05  # every rank's simulated forward work per step
EXTRA_S = 0.10  # the straggler's extra: (0.05 + 0.10) / 0.05 = 3x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--slow-rank", type=int, default=1)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        t0 = time.perf_counter()
        x = torch.randn(16, 8, generator=g)
        y = torch.randint(0, 2, (16,), generator=g)
        time.sleep(WORK_S + (EXTRA_S if rank == args.slow_rank else 0.0))
        loss = F.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        opt.zero_grad()
        loss.backward()  # DDP's all_reduce: the fast ranks wait here for the slow one
        opt.step()
        t2 = time.perf_counter()
        logging.info("step %d loss %.4f compute_ms %.1f sync_ms %.1f step_ms %.1f", step, loss.item(),
                     (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t2 - t0) * 1e3)
    dist.barrier()  # every rank done before teardown (gloo can abort a rank that tears down first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

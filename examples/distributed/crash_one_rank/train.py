"""4 ranks (gloo, CPU): a corrupt label in rank 2's shard makes cross_entropy raise on rank 2 at step 5.

Rank 2 stays alive after its traceback (a non-daemon checkpoint-uploader thread, as real jobs have), so the other
ranks wait in DDP's gradient all_reduce until the collective timeout: three timeouts and one real error, and the
real error is the culprit. Run: torchrun --nproc-per-node 4 --log-dir logs --redirects 3 --tee 3 train.py
"""

import argparse
import logging
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


@record  # writes torchelastic's error.json for the failing rank
def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--timeout", type=float, default=5.0, help="collective timeout, seconds")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    threading.Thread(target=time.sleep, args=(args.timeout + 1,), name="ckpt-uploader").start()
    for step in range(args.steps):
        x = torch.randn(16, 8, generator=g)
        y = torch.randint(0, 4, (16,), generator=g)
        if rank == 2 and step == 5:
            y[3] = 4  # the corrupt sample of rank 2's shard: class 4 of a 4-class head
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        logging.info("step %d loss %.4f", step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""4 ranks (gloo, CPU), gradients averaged by hand: rank 3 skips a step whose filtered batch is empty, and with it
that step's all_reduce calls. From then on rank 3 is one step ahead in the collective sequence: it finishes its loop,
and the other ranks wait in their last all_reduce for a partner that never comes.

The odd rank is the one whose last step (and collective count) differs from the others'.
"""

import argparse
import logging
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--timeout", type=float, default=5.0)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    collectives = 0
    for step in range(args.steps):
        x = torch.randn(8, 8, generator=g)
        y = torch.randint(0, 2, (8,), generator=g)
        keep = torch.ones(8, dtype=torch.bool) if not (rank == 3 and step == 6) else torch.zeros(8, dtype=torch.bool)
        if not keep.any():
            logging.info("skipping an empty batch")
            continue  # BUG: skips this step's all_reduce on this rank only
        loss = F.cross_entropy(model(x[keep]), y[keep])
        opt.zero_grad()
        loss.backward()
        for prm in model.parameters():
            dist.all_reduce(prm.grad)
            prm.grad /= world
            collectives += 1
        opt.step()
        logging.info("step %d loss %.4f collectives %d", step, loss.item(), collectives)
    logging.info("training done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""4 ranks (gloo, CPU), DDP with a DistributedSampler(shuffle=True) that never gets set_epoch(): every epoch visits
the samples in the same order (the log prints each epoch's first indices: they repeat). static_scan names it.
"""

import argparse
import logging
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)), torch.arange(64))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    for epoch in range(args.epochs):
        # BUG: no sampler.set_epoch(epoch) here
        for i, (x, y, idx) in enumerate(loader):
            if i == 0:
                logging.info("epoch %d first indices %s", epoch, idx.tolist())
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            logging.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
            step += 1
    dist.barrier()  # every rank done before teardown (gloo can abort a rank that tears down first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

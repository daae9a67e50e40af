"""4 ranks (gloo, CPU), DDP over a conv net with BatchNorm2d and 2 images per rank: each rank normalises over its own
2 images, so the batch statistics are noise and the running statistics used in eval drift from them. The fix is
SyncBatchNorm (statistics over all ranks' 8 images). static_scan names it.
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
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 2, (64,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=2, sampler=sampler)  # 2 per rank: BatchNorm sees 2 images
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
    model = DDP(model)  # BUG: no nn.SyncBatchNorm.convert_sync_batchnorm(model) first
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
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

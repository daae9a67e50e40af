"""Classify 4 Gaussian blobs, with batches prepared on a background thread (a prefetching loader).

    python train.py --steps 100
"""
import argparse
import queue
import threading

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 4


def make_data(n=512, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, dim, generator=g) * 1.5
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


class PrefetchLoader:
    """Yields shuffled batches for `epochs` epochs; a thread fills a small queue ahead of the training step."""

    def __init__(self, x, y, batch_size=64, epochs=3, seed=0):
        self.x, self.y, self.batch_size, self.epochs, self.seed = x, y, batch_size, epochs, seed

    def _produce(self, q):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.epochs):
            order = torch.randperm(len(self.x), generator=g)
            for i in range(0, len(order), self.batch_size):
                idx = order[i:i + self.batch_size]
                q.put((self.x[idx], self.y[idx]))
        q.put(None)

    def __iter__(self):
        q = queue.Queue(maxsize=4)
        threading.Thread(target=self._produce, args=(q,), daemon=True).start()
        while True:
            batch = q.get()
            if batch is None:
                return
            yield batch


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))
    make_optimizer = lambda params: torch.optim.Adam(params, lr=1e-2)
    return {"model": model, "batch": (x[:64], y[:64]), "data": PrefetchLoader(x, y), "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    t = make_target()
    model, optimizer = t["model"], t["optimizer"]
    step = 0
    for step, batch in enumerate(t["data"]):
        if step >= args.steps:
            break
        optimizer.zero_grad()
        loss = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        if step % 4 == 0:
            print(f"step {step} | loss {loss.item():.4f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)
    print(f"done after {step} steps", flush=True)


if __name__ == "__main__":
    main()

"""Heteroscedastic MLP regressor for last-mile delivery times.

Predicts a mean and a log-variance per parcel and trains on the Gaussian
negative log-likelihood, so the model also reports how uncertain each ETA is.

    python train.py [--epochs 40] [--lr 3e-3]
"""
import argparse
import logging
import math
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
                    datefmt="%m/%d/%Y %H:%M:%S", level=logging.INFO)
logger = logging.getLogger("eta_regressor")

FEATURES = ("distance_km", "stops_before", "hour_sin", "hour_cos", "rain_mm",
            "van_load", "urban", "locker_drop")


def make_deliveries(n, seed):
    """Synthetic parcel log: minutes from dispatch to delivery.

    Locker drops are not scanned by the courier: the system books them at the
    45-minute SLA, so their recorded time is exactly 45 (no noise at all); door
    deliveries are noisy and more so in the rain and in dense urban areas.
    """
    g = torch.Generator().manual_seed(seed)
    dist = 1 + 24 * torch.rand(n, generator=g)
    stops = torch.randint(0, 30, (n,), generator=g).float()
    hour = 7 + 12 * torch.rand(n, generator=g)
    rain = torch.relu(torch.randn(n, generator=g) * 4 - 1)
    load = torch.rand(n, generator=g)
    urban = (torch.rand(n, generator=g) < 0.6).float()
    locker = (torch.rand(n, generator=g) < 0.3).float()
    base = 6 + 2.2 * dist + 3.5 * stops + 8 * torch.sin((hour - 7) / 12 * math.pi) + 1.5 * rain
    noise_sd = 4 + 1.2 * rain + 6 * urban * load
    door = base + noise_sd * torch.randn(n, generator=g)
    minutes = torch.where(locker.bool(), torch.full_like(door, 45.0), door)
    x = torch.stack([dist, stops, torch.sin(hour / 24 * 2 * math.pi), torch.cos(hour / 24 * 2 * math.pi),
                     rain, load, urban, locker], dim=1)
    return x, minutes.unsqueeze(1)


class Standardizer:
    def fit(self, t):
        self.mean, self.std = t.mean(0, keepdim=True), t.std(0, keepdim=True)
        return self

    def __call__(self, t):
        return (t - self.mean) / self.std


class HeteroscedasticMLP(nn.Module):
    def __init__(self, d_in, hidden=128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.SiLU(),
                                  nn.Linear(hidden, hidden), nn.SiLU(),
                                  nn.Linear(hidden, hidden), nn.SiLU())
        self.mean_head = nn.Linear(hidden, 1)
        self.logvar_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.body(x)
        mu = self.mean_head(h)
        logvar = self.logvar_head(h).clamp(-6.0, 6.0)
        return mu, logvar


def gaussian_nll(mu, logvar, y):
    return 0.5 * (logvar + (y - mu) ** 2 / torch.exp(logvar) + math.log(2 * math.pi)).mean()


def loss_fn(model, batch):
    x, y = batch
    mu, logvar = model(x)
    return gaussian_nll(mu, logvar, y)


def make_optimizer(params, lr=1e-2):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def build_data(batch_size=128):
    x_tr, y_tr = make_deliveries(12000, seed=11)
    x_va, y_va = make_deliveries(2000, seed=12)
    xs, ys = Standardizer().fit(x_tr), Standardizer().fit(y_tr)
    train = TensorDataset(xs(x_tr), ys(y_tr))
    val = TensorDataset(xs(x_va), ys(y_va))
    return (DataLoader(train, batch_size=batch_size, shuffle=True),
            DataLoader(val, batch_size=1000), ys)


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=100)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    torch.manual_seed(args.seed)
    train_loader, _, _ = build_data(args.batch_size)
    model = HeteroscedasticMLP(len(FEATURES))
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters(), args.lr),
            "make_optimizer": lambda params: make_optimizer(params, args.lr), "task": "regression"}


@torch.no_grad()
def evaluate(model, loader, ys):
    model.eval()
    nll, se, n = 0.0, 0.0, 0
    for x, y in loader:
        mu, logvar = model(x)
        nll += gaussian_nll(mu, logvar, y).item() * len(y)
        se += ((mu - y) ** 2).sum().item()
        n += len(y)
    model.train()
    return nll / n, math.sqrt(se / n) * ys.std.item()


def main():
    torch.set_num_threads(1)  # small MLP: one CPU thread avoids OpenMP overhead
    args = parse_args()
    torch.manual_seed(args.seed)
    train_loader, val_loader, ys = build_data(args.batch_size)
    model = HeteroscedasticMLP(len(FEATURES))
    optimizer = make_optimizer(model.parameters(), args.lr)
    logger.info("***** Running training *****")
    logger.info("  Num examples = %d, features = %s", len(train_loader.dataset), ",".join(FEATURES))
    logger.info("  Num epochs = %d, batch size = %d, lr = %g", args.epochs, args.batch_size, args.lr)
    logger.info("  Model parameters = %d", sum(p.numel() for p in model.parameters()))
    step, t0 = 0, time.time()
    for epoch in range(1, args.epochs + 1):
        running, count = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running += loss.item()
            count += 1
            step += 1
            if step % args.log_every == 0:
                with torch.no_grad():
                    _, lv = model(batch[0])
                logger.info("step %d | epoch %d | train_nll %.4f | logvar min %.2f max %.2f | %.1fs",
                            step, epoch, running / count, lv.min().item(), lv.max().item(), time.time() - t0)
        val_nll, val_rmse = evaluate(model, val_loader, ys)
        logger.info("epoch %d done | train_nll %.4f | val_nll %.4f | val_rmse %.2f min",
                    epoch, running / count, val_nll, val_rmse)
    logger.info("Training completed in %.1fs", time.time() - t0)


if __name__ == "__main__":
    main()

"""Vehicle repair-cost regression.

Predicts the final invoice amount of a workshop repair job from the intake
ticket. Invoice amounts are heavily right-skewed, so the network regresses
log1p(cost) with a Huber loss; metrics are also reported back in euros.
"""
import logging
import math

import numpy as np
import torch
from torch import nn

SEED = 3
N_JOBS = 3600
VAL_FRACTION = 0.2
BATCH_SIZE = 256
EPOCHS = 36
LR = 3e-3
WEIGHT_DECAY = 1e-2
HUBER_DELTA = 1.0
REPAIR_TYPES = ["brakes", "engine", "body", "electrical", "tyres", "service"]

log = logging.getLogger("repair_cost")


def make_jobs(n, seed=SEED):
    """Synthetic intake tickets: vehicle info, damage assessment and the final invoice."""
    rng = np.random.default_rng(seed)
    age = rng.gamma(2.5, 3.0, size=n)
    mileage = np.clip(age * rng.normal(14000, 4000, size=n), 500, None)
    vehicle_value = rng.lognormal(9.8, 0.5, size=n) * np.exp(-0.07 * age)
    severity = rng.integers(1, 6, size=n)
    parts = rng.poisson(1 + 0.8 * severity)
    labour_hours_est = rng.gamma(1.5 + severity, 0.9)
    premium_brand = rng.binomial(1, 0.22, size=n)
    repair = rng.choice(len(REPAIR_TYPES), size=n, p=[0.2, 0.12, 0.2, 0.13, 0.15, 0.2])
    type_base = np.array([5.6, 6.8, 6.4, 5.9, 5.5, 5.0])[repair]

    log_cost = (
        type_base
        + 0.22 * severity
        + 0.45 * np.log1p(labour_hours_est)
        + 0.06 * parts
        + 0.35 * premium_brand
        + 0.15 * np.log(vehicle_value / 15000)
        + 0.02 * age
    )
    log_cost += rng.standard_t(4, size=n) * 0.28
    cost = np.expm1(log_cost)

    features = np.column_stack([
        age, np.log(mileage), np.log(vehicle_value), severity, parts,
        labour_hours_est, premium_brand, np.eye(len(REPAIR_TYPES))[repair],
    ]).astype(np.float32)
    return features, cost.astype(np.float32)


def prepare_data():
    X, cost = make_jobs(N_JOBS)
    perm = np.random.default_rng(SEED + 1).permutation(len(X))
    n_val = int(len(X) * VAL_FRACTION)
    va, tr = perm[:n_val], perm[n_val:]
    mean, std = X[tr].mean(axis=0), X[tr].std(axis=0) + 1e-6
    Xs = (X - mean) / std
    y = np.log1p(cost)
    t = torch.from_numpy
    return {
        "train": (t(Xs[tr]), t(y[tr])),
        "val": (t(Xs[va]), t(y[va])),
        "val_cost": cost[va],
    }


class CostRegressor(nn.Module):
    def __init__(self, n_in, hidden=96):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


def compute_loss(model, batch):
    x, y = batch
    return nn.functional.huber_loss(model(x), y, delta=HUBER_DELTA)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.3, patience=3)


def loader(x, y, batch_size, shuffle, generator=None):
    idx = torch.randperm(len(x), generator=generator) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), batch_size):
        j = idx[i:i + batch_size]
        yield x[j], y[j]


@torch.no_grad()
def evaluate(model, data):
    model.eval()
    x, y = data["val"]
    pred = model(x)
    model.train()
    loss = nn.functional.huber_loss(pred, y, delta=HUBER_DELTA).item()
    rmse_log = torch.sqrt(torch.mean((pred - y) ** 2)).item()
    r2_log = 1.0 - torch.sum((pred - y) ** 2).item() / torch.sum((y - y.mean()) ** 2).item()
    pred_cost = np.expm1(pred.numpy())
    mae_eur = float(np.mean(np.abs(pred_cost - data["val_cost"])))
    mdape = float(np.median(np.abs(pred_cost - data["val_cost"]) / data["val_cost"]))
    return loss, rmse_log, r2_log, mae_eur, mdape


def make_target():
    torch.manual_seed(SEED)
    data = prepare_data()
    x, y = data["train"]
    model = CostRegressor(x.shape[1])
    sample = list(loader(x, y, BATCH_SIZE, shuffle=False))[:3]
    return {
        "model": model,
        "batch": sample[0],
        "data": sample,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.manual_seed(SEED)
    data = prepare_data()
    x_tr, y_tr = data["train"]
    cost = data["val_cost"]
    log.info("train=%d val=%d features=%d val cost: median=%.0f mean=%.0f p99=%.0f EUR",
             len(x_tr), len(data["val"][0]), x_tr.shape[1],
             np.median(cost), cost.mean(), np.percentile(cost, 99))
    model = CostRegressor(x_tr.shape[1])
    optimizer = make_optimizer(model.parameters())
    scheduler = make_scheduler(optimizer)
    gen = torch.Generator().manual_seed(SEED)
    for epoch in range(1, EPOCHS + 1):
        total, seen = 0.0, 0
        for batch in loader(x_tr, y_tr, BATCH_SIZE, shuffle=True, generator=gen):
            optimizer.zero_grad(set_to_none=True)
            loss = compute_loss(model, batch)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch[1])
            seen += len(batch[1])
        val_loss, rmse_log, r2_log, mae_eur, mdape = evaluate(model, data)
        scheduler.step(val_loss)
        lr = optimizer.param_groups[0]["lr"]
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_rmse_log=%.4f val_r2_log=%.3f "
                 "val_mae_eur=%.1f val_mdape=%.3f lr=%.2e",
                 epoch, total / seen, val_loss, rmse_log, r2_log, mae_eur, mdape, lr)
    if not math.isfinite(val_loss):
        raise RuntimeError("validation loss is not finite")


if __name__ == "__main__":
    main()

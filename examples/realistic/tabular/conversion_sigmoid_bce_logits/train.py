"""Purchase-propensity model: will a web session end in a purchase?

Synthetic session logs (generated below, fixed seed) -> 10 numeric features; MLP classifier
trained with BCEWithLogitsLoss and Adam, step-decay LR.
"""
import logging
import math
import time

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("propensity")

SEED = 42
N_SESSIONS = 12000
BATCH = 256
EPOCHS = 20
LR = 1e-3
FEATURES = ["pages_viewed", "session_min", "cart_adds", "returning", "days_since_last",
            "discount_seen", "mobile", "search_queries", "hour_sin", "hour_cos"]


def simulate_sessions(n, seed):
    rng = np.random.default_rng(seed)
    pages = rng.poisson(6, n) + 1
    minutes = rng.gamma(2.0, 3.0, n) + 0.2 * pages
    cart = rng.binomial(pages, 0.08)
    returning = (rng.random(n) < 0.4).astype(float)
    days = np.where(returning > 0, rng.exponential(20, n), 365.0)
    discount = (rng.random(n) < 0.25).astype(float)
    mobile = (rng.random(n) < 0.55).astype(float)
    searches = rng.poisson(1.5, n)
    hour = rng.integers(0, 24, n)
    logit = (-2.0 + 1.1 * np.minimum(cart, 3) + 0.35 * np.log1p(minutes) + 0.8 * returning
             - 0.6 * np.log1p(days) / np.log(366) + 0.9 * discount * (cart > 0) - 0.4 * mobile
             + 0.25 * np.log1p(searches) + 0.3 * np.cos(2 * np.pi * (hour - 20) / 24))
    bought = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    X = np.column_stack([pages, minutes, cart, returning, np.log1p(days), discount, mobile, searches,
                         np.sin(2 * np.pi * hour / 24), np.cos(2 * np.pi * hour / 24)]).astype(np.float32)
    return X, bought


def get_splits():
    X, y = simulate_sessions(N_SESSIONS, SEED)
    n_tr, n_va = int(0.7 * len(X)), int(0.15 * len(X))
    mu, sd = X[:n_tr].mean(0), X[:n_tr].std(0) + 1e-6
    X = (X - mu) / sd
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    return ((t(X[:n_tr]), t(y[:n_tr])),
            (t(X[n_tr:n_tr + n_va]), t(y[n_tr:n_tr + n_va])),
            (t(X[n_tr + n_va:]), t(y[n_tr + n_va:])))


class PropensityMLP(nn.Module):
    def __init__(self, n_features, hidden=(64, 32)):
        super().__init__()
        layers, d = [], n_features
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU()]
            d = h
        layers += [nn.Linear(d, 1), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def auc(p, y):
    r = torch.empty_like(p)
    r[p.argsort()] = torch.arange(1, len(p) + 1, dtype=p.dtype)
    npos = y.sum()
    nneg = len(y) - npos
    return ((r[y > 0.5].sum() - npos * (npos + 1) / 2) / (npos * nneg)).item()


@torch.no_grad()
def evaluate(model, split):
    x, y = split
    model.eval()
    out = model(x)
    model.train()
    loss = criterion(out, y).item()
    pred = (out > 0.5).float()
    acc = (pred == y).float().mean().item()
    tp = (pred * y).sum()
    f1 = (2 * tp / (pred.sum() + y.sum()).clamp(min=1)).item()
    return loss, acc, f1, auc(out, y), out.mean().item()


def iterate(split, bs, gen):
    x, y = split
    perm = torch.randperm(len(x), generator=gen)
    for i in range(0, len(x) - bs + 1, bs):
        idx = perm[i:i + bs]
        yield x[idx], y[idx]


def make_target():
    torch.manual_seed(SEED)
    train, _, _ = get_splits()
    gen = torch.Generator().manual_seed(SEED)
    it = iterate(train, BATCH, gen)
    data = [next(it) for _ in range(3)]
    model = PropensityMLP(len(FEATURES))
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": 2, "task": "classification"}


def main():
    torch.manual_seed(SEED)
    train, val, test = get_splits()
    log.info("sessions train=%d val=%d test=%d purchase_rate=%.3f",
             len(train[0]), len(val[0]), len(test[0]), train[1].mean().item())
    model = PropensityMLP(len(FEATURES))
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=8, gamma=0.3)
    gen = torch.Generator().manual_seed(SEED)
    t0 = time.time()
    for epoch in range(EPOCHS):
        losses = []
        for batch in iterate(train, BATCH, gen):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        vl, va, vf1, vauc, vmean = evaluate(model, val)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_f1=%.3f val_auc=%.3f mean_p=%.3f lr=%.1e",
                 epoch, float(np.mean(losses)), vl, va, vf1, vauc, vmean, optimizer.param_groups[0]["lr"])
    tl, ta, tf1, tauc, tmean = evaluate(model, test)
    log.info("test_loss=%.4f test_acc=%.3f test_f1=%.3f test_auc=%.3f mean_p=%.3f (%.1fs)",
             tl, ta, tf1, tauc, tmean, time.time() - t0)


if __name__ == "__main__":
    main()

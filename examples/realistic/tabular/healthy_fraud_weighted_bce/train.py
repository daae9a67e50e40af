"""Card-transaction fraud classifier (MLP on tabular features).

Roughly 8% of transactions are fraudulent. The network outputs P(fraud)
directly (sigmoid head, consumed as-is by the rules engine) and is trained
with a per-sample weighted BCE so both classes carry equal total weight.
"""
import logging
import math

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
logger = logging.getLogger("fraud_mlp")

FEATURES = ["amount_log", "hour_sin", "hour_cos", "merchant_risk", "dist_home_km_log",
            "txn_last_24h", "avg_amount_ratio", "card_age_days_log", "foreign", "card_present"]

CONFIG = {
    "n_rows": 9000,
    "val_frac": 0.2,
    "batch_size": 128,
    "epochs": 20,
    "lr": 2e-3,
    "weight_decay": 1e-4,
    "hidden": (64, 32),
    "dropout": 0.1,
    "seed": 11,
}


def generate_transactions(n, seed):
    rng = np.random.default_rng(seed)
    hour = rng.integers(0, 24, n)
    amount = rng.lognormal(3.5, 1.0, n)
    merchant_risk = rng.beta(2, 8, n)
    dist = rng.lognormal(1.5, 1.2, n)
    txn_24h = rng.poisson(3, n)
    avg_ratio = rng.lognormal(0, 0.5, n)
    card_age = rng.lognormal(5.5, 1.0, n)
    foreign = (rng.random(n) < 0.1).astype(float)
    present = (rng.random(n) < 0.6).astype(float)
    night = ((hour < 6) | (hour > 22)).astype(float)
    score = (1.8 * np.log(avg_ratio) + 4.0 * merchant_risk + 0.35 * np.log1p(dist)
             + 0.18 * txn_24h + 1.0 * foreign - 1.2 * present + 0.8 * night
             - 0.25 * (np.log(card_age) - 5.5) + 0.3 * (np.log(amount) - 3.5)
             + 1.2 * foreign * (1 - present))
    z = 3.0 * score - 11.5
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float32)
    x = np.stack([np.log(amount), np.sin(2 * np.pi * hour / 24), np.cos(2 * np.pi * hour / 24),
                  merchant_risk, np.log1p(dist), txn_24h, avg_ratio, np.log(card_age), foreign,
                  present], axis=1).astype(np.float32)
    return x, y


class FraudMLP(nn.Module):
    def __init__(self, n_in, hidden=(64, 32), dropout=0.1):
        super().__init__()
        layers, d = [], n_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        layers += [nn.Linear(d, 1), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


bce = nn.BCELoss(reduction="none")


def weighted_bce(model, batch):
    x, y, w = batch
    probs = model(x)
    return (bce(probs, y) * w).sum() / w.sum()


def make_optimizer(params, cfg=CONFIG):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def prepare(cfg=CONFIG):
    x, y = generate_transactions(cfg["n_rows"], cfg["seed"])
    rng = np.random.default_rng(cfg["seed"] + 1)
    perm = rng.permutation(len(y))
    n_val = int(len(y) * cfg["val_frac"])
    va, tr = perm[:n_val], perm[n_val:]
    mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-6
    x = (x - mu) / sd
    pos_rate = y[tr].mean()
    # equal total weight for both classes
    w = np.where(y == 1, 0.5 / pos_rate, 0.5 / (1 - pos_rate)).astype(np.float32)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    return (t(x[tr]), t(y[tr]), t(w[tr])), (t(x[va]), t(y[va]), t(w[va])), float(pos_rate)


def iterate(split, bs, shuffle, gen=None):
    n = len(split[1])
    idx = torch.randperm(n, generator=gen) if shuffle else torch.arange(n)
    for i in range(0, n, bs):
        j = idx[i:i + bs]
        yield tuple(a[j] for a in split)


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return (ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, split):
    model.eval()
    x, y, w = split
    probs = model(x)
    val_loss = bce(probs, y).mean().item()
    wloss = ((bce(probs, y) * w).sum() / w.sum()).item()
    p, t = probs.numpy(), y.numpy()
    pred = (p >= 0.5).astype(np.float32)
    recall = (pred[t == 1] == 1).mean()
    spec = (pred[t == 0] == 0).mean()
    model.train()
    return {"val_loss": val_loss, "val_wloss": wloss, "val_auc": roc_auc(p, t),
            "val_acc": (pred == t).mean(), "val_bal_acc": 0.5 * (recall + spec),
            "val_recall": recall, "mean_p": p.mean()}


_CACHE = {}


def get_data():
    if not _CACHE:
        _CACHE["splits"] = prepare()
    return _CACHE["splits"]


def make_target():
    torch.manual_seed(CONFIG["seed"])
    train, _, _ = get_data()
    model = FraudMLP(train[0].shape[1], CONFIG["hidden"], CONFIG["dropout"])
    gen = torch.Generator().manual_seed(CONFIG["seed"])
    it = iterate(train, CONFIG["batch_size"], True, gen)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": weighted_bce,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    cfg = CONFIG
    torch.manual_seed(cfg["seed"])
    train, val, pos_rate = get_data()
    logger.info("rows train=%d val=%d features=%d fraud_rate=%.4f (val %.4f)", len(train[1]), len(val[1]),
                train[0].shape[1], pos_rate, val[1].mean().item())
    logger.info("sample weights: fraud=%.3f legit=%.3f", 0.5 / pos_rate, 0.5 / (1 - pos_rate))
    model = FraudMLP(train[0].shape[1], cfg["hidden"], cfg["dropout"])
    optimizer = make_optimizer(model.parameters(), cfg)
    gen = torch.Generator().manual_seed(cfg["seed"])
    n_batches = math.ceil(len(train[1]) / cfg["batch_size"])
    best = (-1, 0.0)
    for epoch in range(1, cfg["epochs"] + 1):
        tot = 0.0
        for batch in iterate(train, cfg["batch_size"], True, gen):
            loss = weighted_bce(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tot += loss.item()
        m = evaluate(model, val)
        logger.info("epoch %d train_loss=%.4f val_loss=%.4f val_wloss=%.4f val_auc=%.4f val_acc=%.3f "
                    "val_bal_acc=%.3f val_recall=%.3f mean_p=%.3f", epoch, tot / n_batches, m["val_loss"],
                    m["val_wloss"], m["val_auc"], m["val_acc"], m["val_bal_acc"], m["val_recall"], m["mean_p"])
        if m["val_auc"] > best[1]:
            best = (epoch, m["val_auc"])
    logger.info("best val_auc=%.4f at epoch %d", best[1], best[0])


if __name__ == "__main__":
    main()

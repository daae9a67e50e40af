"""Support-ticket priority model (low / normal / urgent) from ticket metadata.

The labels come from the priority agents picked by hand, which is known to be inconsistent
(two agents agree on only ~60% of re-labelled tickets), so the data generator below mimics
that: a moderately separable signal plus a large share of arbitrary agent labels.
"""
import logging
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger("ticket_priority")

CONFIG = {
    "seed": 3,
    "n_tickets": 9000,
    "val_fraction": 0.2,
    "batch_size": 128,
    "max_epochs": 40,
    "patience": 8,
    "lr": 3e-3,
    "weight_decay": 1e-3,
    "hidden": 64,
    "dropout": 0.2,
}
PRIORITIES = ["low", "normal", "urgent"]
FEATURE_NAMES = ["log_customer_arr", "sla_tier", "n_affected_users", "is_outage_keyword",
                 "hours_open", "prior_tickets_30d", "sentiment", "weekend", "product_area"]
N_AREAS = 6


def generate_tickets(n, seed):
    rng = np.random.default_rng(seed)
    arr = rng.normal(10.5, 1.2, n)
    tier = rng.integers(0, 3, n)
    affected = rng.lognormal(1.0, 1.3, n)
    outage_kw = (rng.random(n) < 0.12).astype(np.float32)
    hours = rng.exponential(6.0, n)
    prior = rng.poisson(1.2, n)
    sentiment = np.clip(rng.normal(0.0, 0.5, n), -1, 1)
    weekend = (rng.random(n) < 2 / 7).astype(np.float32)
    area = rng.integers(0, N_AREAS, n)
    area_weight = np.array([0.0, 0.3, -0.2, 0.5, 0.1, -0.4])[area]

    severity = (0.45 * (arr - 10.5) + 0.5 * tier + 0.55 * np.log1p(affected) + 1.6 * outage_kw
                + 0.04 * np.minimum(hours, 24) + 0.15 * prior - 0.7 * sentiment + area_weight
                + rng.normal(0, 0.6, n))
    cut_lo, cut_hi = np.quantile(severity, [0.35, 0.75])
    priority = np.digitize(severity, [cut_lo, cut_hi])

    arbitrary = rng.random(n) < 0.30
    priority = np.where(arbitrary, rng.integers(0, 3, n), priority)

    X = np.column_stack([arr, tier, np.log1p(affected), outage_kw, np.log1p(hours), prior,
                         sentiment, weekend, area]).astype(np.float32)
    return X, priority.astype(np.int64)


class TicketNet(nn.Module):
    def __init__(self, n_numeric, hidden, dropout):
        super().__init__()
        self.area_emb = nn.Embedding(N_AREAS, 4)
        self.mlp = nn.Sequential(
            nn.Linear(n_numeric + 4, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, len(PRIORITIES)),
        )

    def forward(self, numeric, area):
        return self.mlp(torch.cat([numeric, self.area_emb(area)], dim=1))


def prepare(cfg=CONFIG):
    X, y = generate_tickets(cfg["n_tickets"], cfg["seed"])
    perm = np.random.default_rng(cfg["seed"] + 1).permutation(len(X))
    n_val = int(len(X) * cfg["val_fraction"])
    val_idx, tr_idx = perm[:n_val], perm[n_val:]
    numeric, area = X[:, :-1], X[:, -1].astype(np.int64)
    mu, sigma = numeric[tr_idx].mean(0), numeric[tr_idx].std(0) + 1e-6
    numeric = (numeric - mu) / sigma

    def pack(idx):
        return (torch.from_numpy(numeric[idx]), torch.from_numpy(area[idx]), torch.from_numpy(y[idx]))

    return pack(tr_idx), pack(val_idx)


def build_model(cfg=CONFIG):
    return TicketNet(len(FEATURE_NAMES) - 1, cfg["hidden"], cfg["dropout"])


def make_optimizer(params, cfg=CONFIG):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def loss_fn(model, batch):
    numeric, area, target = batch
    return F.cross_entropy(model(numeric, area), target)


def minibatches(split, batch_size, generator):
    n = len(split[0])
    order = torch.randperm(n, generator=generator)
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        yield tuple(t[idx] for t in split)


@torch.no_grad()
def evaluate(model, split):
    model.eval()
    numeric, area, target = split
    logits = model(numeric, area)
    model.train()
    pred = logits.argmax(1)
    per_class = [(pred[target == k] == k).float().mean().item() for k in range(len(PRIORITIES))]
    return F.cross_entropy(logits, target).item(), (pred == target).float().mean().item(), per_class


def make_target():
    torch.manual_seed(CONFIG["seed"])
    train, _ = prepare()
    gen = torch.Generator().manual_seed(CONFIG["seed"])
    data = []
    for b in minibatches(train, CONFIG["batch_size"], gen):
        data.append(b)
        if len(data) == 4:
            break
    model = build_model()
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(PRIORITIES), "task": "classification"}


def main(cfg=CONFIG):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.manual_seed(cfg["seed"])
    train, val = prepare(cfg)
    counts = torch.bincount(train[2], minlength=len(PRIORITIES)).tolist()
    logger.info("tickets train=%d val=%d label_counts=%s", len(train[0]), len(val[0]),
                dict(zip(PRIORITIES, counts)))
    model = build_model(cfg)
    opt = make_optimizer(model.parameters(), cfg)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=3)
    gen = torch.Generator().manual_seed(cfg["seed"])

    best_loss, best_epoch, best_state = math.inf, 0, None
    for epoch in range(1, cfg["max_epochs"] + 1):
        tot, seen, correct = 0.0, 0, 0
        for batch in minibatches(train, cfg["batch_size"], gen):
            opt.zero_grad()
            logits = model(batch[0], batch[1])
            loss = F.cross_entropy(logits, batch[2])
            loss.backward()
            opt.step()
            tot += loss.item() * len(batch[2])
            correct += (logits.argmax(1) == batch[2]).sum().item()
            seen += len(batch[2])
        val_loss, val_acc, recall = evaluate(model, val)
        sched.step(val_loss)
        logger.info("epoch %d train_loss=%.4f train_acc=%.3f val_loss=%.4f val_acc=%.3f "
                    "recall_low=%.2f recall_normal=%.2f recall_urgent=%.2f lr=%.1e",
                    epoch, tot / seen, correct / seen, val_loss, val_acc, *recall, opt.param_groups[0]["lr"])
        if val_loss < best_loss - 1e-4:
            best_loss, best_epoch = val_loss, epoch
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        elif epoch - best_epoch >= cfg["patience"]:
            logger.info("early stopping at epoch %d (best epoch %d, val_loss=%.4f)", epoch, best_epoch, best_loss)
            break

    model.load_state_dict(best_state)
    val_loss, val_acc, _ = evaluate(model, val)
    tr_loss, tr_acc, _ = evaluate(model, train)
    logger.info("best checkpoint: train_loss=%.4f train_acc=%.3f val_loss=%.4f val_acc=%.3f",
                tr_loss, tr_acc, val_loss, val_acc)


if __name__ == "__main__":
    main()

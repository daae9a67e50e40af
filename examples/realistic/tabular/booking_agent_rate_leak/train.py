"""Hotel booking cancellation model.

Trains an MLP on the booking history (bookings.csv) and backtests it on the
following month (bookings_next.csv). Travel agents are high-cardinality, so
they enter the model as a smoothed per-agent cancellation rate.
"""
import csv
import logging
from pathlib import Path

import numpy as np
import torch
from torch import nn

DATA_DIR = Path(__file__).resolve().parent
SEED = 11
VAL_FRACTION = 0.2
BATCH_SIZE = 128
EPOCHS = 16
LR = 1e-3
WEIGHT_DECAY = 1e-4
AGENT_SMOOTHING = 2.0
SEGMENTS = ["online_ta", "offline_ta", "direct", "corporate"]
DEPOSITS = ["none", "refundable", "non_refund"]
NUMERIC = ["lead_time", "nights", "guests", "adr", "special_requests", "previous_cancellations"]

log = logging.getLogger("cancel")


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def fit_agent_rate(agent, target, m=AGENT_SMOOTHING):
    """Smoothed (m-estimate) cancellation rate per agent."""
    prior = float(target.mean())
    keys, inv = np.unique(agent, return_inverse=True)
    counts = np.bincount(inv)
    sums = np.bincount(inv, weights=target)
    rates = (sums + m * prior) / (counts + m)
    return dict(zip(keys, rates)), prior


def apply_agent_rate(agent, table, prior):
    return np.array([table.get(a, prior) for a in agent])


def featurize(df, agent_rate):
    num = np.column_stack([df[c].astype(np.float64) for c in NUMERIC])
    num[:, 0] = np.log1p(num[:, 0])
    num[:, 3] = np.log(num[:, 3])
    seg = np.stack([(df["market_segment"] == s) for s in SEGMENTS], axis=1)
    dep = np.stack([(df["deposit_type"] == d) for d in DEPOSITS], axis=1)
    return np.column_stack([num, agent_rate, seg, dep]).astype(np.float32)


def train_val_split(n):
    perm = np.random.default_rng(SEED).permutation(n)
    n_val = int(n * VAL_FRACTION)
    return perm[n_val:], perm[:n_val]


def load_data():
    hist = read_csv(DATA_DIR / "bookings.csv")
    nxt = read_csv(DATA_DIR / "bookings_next.csv")
    y = hist["is_canceled"].astype(np.float32)
    y_next = nxt["is_canceled"].astype(np.float32)
    tr, va = train_val_split(len(y))

    agent_table, prior = fit_agent_rate(hist["agent"], y)
    agent_rate = apply_agent_rate(hist["agent"], agent_table, prior)
    X = featurize(hist, agent_rate)
    X_next = featurize(nxt, apply_agent_rate(nxt["agent"], agent_table, prior))

    mean, std = X[tr].mean(axis=0), X[tr].std(axis=0) + 1e-6
    X, X_next = (X - mean) / std, (X_next - mean) / std
    t = torch.from_numpy
    return {
        "train": (t(X[tr]), t(y[tr])),
        "val": (t(X[va]), t(y[va])),
        "next": (t(X_next), t(y_next)),
    }


class CancelNet(nn.Module):
    def __init__(self, n_in, hidden=64):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


def compute_loss(model, batch):
    x, y = batch
    return nn.functional.binary_cross_entropy_with_logits(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def batches(x, y, batch_size, generator=None):
    idx = torch.randperm(len(x), generator=generator) if generator is not None else torch.arange(len(x))
    for i in range(0, len(x), batch_size):
        j = idx[i:i + batch_size]
        yield x[j], y[j]


def auc_score(scores, labels):
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores)] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), len(labels) - pos.sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, split):
    x, y = split
    model.eval()
    logits = model(x)
    model.train()
    loss = nn.functional.binary_cross_entropy_with_logits(logits, y).item()
    acc = ((logits > 0).float() == y).float().mean().item()
    return loss, acc, auc_score(logits.numpy(), y.numpy())


def make_target():
    torch.manual_seed(SEED)
    data = load_data()
    x, y = data["train"]
    model = CancelNet(x.shape[1])
    sample = list(batches(x, y, BATCH_SIZE))[:3]
    return {
        "model": model,
        "batch": sample[0],
        "data": sample,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.manual_seed(SEED)
    data = load_data()
    x_tr, y_tr = data["train"]
    log.info("train=%d val=%d next_month=%d n_features=%d cancel_rate=%.3f",
             len(x_tr), len(data["val"][0]), len(data["next"][0]), x_tr.shape[1], y_tr.mean().item())
    model = CancelNet(x_tr.shape[1])
    optimizer = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)
    for epoch in range(1, EPOCHS + 1):
        running, seen = 0.0, 0
        for batch in batches(x_tr, y_tr, BATCH_SIZE, gen):
            optimizer.zero_grad()
            loss = compute_loss(model, batch)
            loss.backward()
            optimizer.step()
            running += loss.item() * len(batch[1])
            seen += len(batch[1])
        if epoch == 1 or epoch % 2 == 0:
            val_loss, val_acc, val_auc = evaluate(model, data["val"])
            log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_auc=%.3f",
                     epoch, running / seen, val_loss, val_acc, val_auc)
    loss, acc, auc = evaluate(model, data["next"])
    log.info("backtest next_month loss=%.4f acc=%.3f auc=%.3f", loss, acc, auc)


if __name__ == "__main__":
    main()

"""Churn model for prepaid telco subscribers.

Per-subscriber features are aggregated from the raw usage event log (calls,
sms, data sessions, top-ups, support tickets); the churn flag comes from the
CRM subscriber export. Keras-style epoch logging.
"""
import argparse
import csv
import itertools
import math
import os
import random
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(
    seed=7,
    n_subscribers=3000,
    batch_size=64,
    epochs=20,
    lr=1e-3,
    weight_decay=0.0,
    hidden=128,
    val_frac=0.2,
)

EVENT_TYPES = ["call", "sms", "data", "topup", "ticket"]


# ---------------------------------------------------------------------------
# synthetic source tables (stand-in for the warehouse extracts)
# ---------------------------------------------------------------------------
def write_source_tables(out_dir, n, seed, horizon=1460):
    rng = np.random.default_rng(seed)
    # subscriber ids are issued sequentially at activation time
    signup_ts = np.sort(rng.uniform(0, horizon, size=n))
    signup_day = signup_ts.astype(int)
    ids = 100000 + np.arange(n)
    region = rng.choice(["north", "south", "east", "west", "metro", "rural"], size=n)

    engagement = rng.normal(0, 1, size=n)
    price_sens = rng.normal(0, 1, size=n)
    friction = rng.gamma(1.5, 1.0, size=n)
    tenure = (horizon - signup_ts) / horizon
    logit = -1.0 - 3.0 * engagement + 2.2 * price_sens + 1.6 * (friction - 1.5) - 2.0 * tenure
    churned = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)

    events = []
    for i in range(n):
        sid = int(ids[i])
        n_ev = int(rng.integers(15, 45))
        rate = np.array([
            math.exp(0.5 * engagement[i]),
            math.exp(0.3 * price_sens[i]),
            math.exp(0.6 * engagement[i] - 0.2 * price_sens[i]),
            math.exp(-0.4 * price_sens[i]),
            0.3 * friction[i],
        ])
        kinds = rng.choice(5, size=n_ev, p=rate / rate.sum())
        days = signup_day[i] + rng.integers(0, max(1, horizon - signup_day[i]), size=n_ev)
        u = rng.random(n_ev)
        amounts = np.select(
            [kinds == 0, kinds == 1, kinds == 2, kinds == 3],
            [-np.log1p(-u) * (3.0 + engagement[i]),
             1.0 + 3 * u,
             -np.log1p(-u) * 100.0 * math.exp(0.4 * engagement[i]),
             np.array([5, 10, 20, 50])[(u * 4).astype(int)] * (1.3 if price_sens[i] < 0 else 0.8)],
            default=1.0 + friction[i] * u,
        )
        events.extend(zip([sid] * n_ev, days.tolist(), [EVENT_TYPES[k] for k in kinds],
                          np.round(amounts, 3).tolist()))
    # the log is ordered by time, as it lands in the warehouse
    events.sort(key=lambda r: r[1])

    ev_path = os.path.join(out_dir, "usage_events.csv")
    with open(ev_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["subscriber_id", "day", "event_type", "amount"])
        w.writerows(events)

    crm_path = os.path.join(out_dir, "crm_subscribers.csv")
    crm = sorted(range(n), key=lambda i: (signup_day[i], region[i]))  # CRM report: by signup date, region
    with open(crm_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["subscriber_id", "signup_date", "region", "plan", "churned"])
        for i in crm:
            w.writerow([int(ids[i]), int(signup_day[i]), region[i], "prepaid", int(churned[i])])
    return ev_path, crm_path


# ---------------------------------------------------------------------------
# feature building
# ---------------------------------------------------------------------------
def aggregate_events(ev_path):
    with open(ev_path) as f:
        rows = list(csv.DictReader(f))
    rows.sort(key=lambda r: int(r["subscriber_id"]))
    keys, feats = [], []
    for sid, grp in itertools.groupby(rows, key=lambda r: int(r["subscriber_id"])):
        grp = list(grp)
        cnt = {t: 0 for t in EVENT_TYPES}
        tot = {t: 0.0 for t in EVENT_TYPES}
        days = []
        for r in grp:
            cnt[r["event_type"]] += 1
            tot[r["event_type"]] += float(r["amount"])
            days.append(int(r["day"]))
        n_ev = len(grp)
        span = max(days) - min(days) + 1
        row = [math.log1p(n_ev), math.log1p(span), math.log1p(n_ev / span * 30)]
        for t in EVENT_TYPES:
            row.append(cnt[t] / n_ev)
            row.append(math.log1p(tot[t]))
            row.append(math.log1p(tot[t] / cnt[t]) if cnt[t] else 0.0)
        row.append((1460 - min(days)) / 1460.0)
        keys.append(sid)
        feats.append(row)
    return keys, np.asarray(feats, dtype=np.float32)


def load_labels(crm_path):
    with open(crm_path) as f:
        rows = list(csv.DictReader(f))
    return {int(r["subscriber_id"]): int(r["churned"]) for r in rows}


def build_dataset(cfg, tmp_dir):
    ev_path, crm_path = write_source_tables(tmp_dir, cfg["n_subscribers"], cfg["seed"])
    keys, X = aggregate_events(ev_path)
    labels = load_labels(crm_path)
    y = np.asarray([labels[k] for k in keys], dtype=np.int64)
    assert len(X) == len(y), (len(X), len(y))

    rng = np.random.default_rng(cfg["seed"] + 1)
    perm = rng.permutation(len(X))
    n_val = int(len(X) * cfg["val_frac"])
    va, tr = perm[:n_val], perm[n_val:]
    mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-6
    X = (X - mu) / sd
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    return (Xt[tr], yt[tr]), (Xt[va], yt[va])


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class ChurnMLP(nn.Module):
    def __init__(self, d_in, hidden, n_classes=2):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, n_classes),
        )

    def forward(self, x):
        return self.net(x)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def batches(X, y, bs, shuffle, gen=None):
    idx = torch.randperm(len(X), generator=gen) if shuffle else torch.arange(len(X))
    for i in range(0, len(X), bs):
        j = idx[i:i + bs]
        yield X[j], y[j]


@torch.no_grad()
def evaluate(model, X, y, bs=512):
    model.eval()
    tot, correct = 0.0, 0
    for xb, yb in batches(X, y, bs, shuffle=False):
        logits = model(xb)
        tot += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
    model.train()
    return tot / len(X), correct / len(X)


def make_optimizer(params, cfg=CONFIG):
    return torch.optim.Adam(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (Xtr, ytr), _ = build_dataset(cfg, tmp)
    model = ChurnMLP(Xtr.shape[1], cfg["hidden"])
    data = [(Xtr[i * cfg["batch_size"]:(i + 1) * cfg["batch_size"]],
             ytr[i * cfg["batch_size"]:(i + 1) * cfg["batch_size"]]) for i in range(4)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters(), cfg),
        "num_classes": 2,
        "task": "classification",
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    p.add_argument("--batch_size", type=int, default=CONFIG["batch_size"])
    args = p.parse_args()
    cfg = dict(CONFIG, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size)

    random.seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])

    with tempfile.TemporaryDirectory() as tmp:
        (Xtr, ytr), (Xva, yva) = build_dataset(cfg, tmp)
    print(f"train subscribers: {len(Xtr)}  val subscribers: {len(Xva)}  features: {Xtr.shape[1]}")
    print(f"churn rate train={ytr.float().mean():.3f} val={yva.float().mean():.3f}")

    model = ChurnMLP(Xtr.shape[1], cfg["hidden"])
    opt = make_optimizer(model.parameters(), cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model: ChurnMLP  Total params: {n_params:,}")

    gen = torch.Generator().manual_seed(cfg["seed"])
    steps = math.ceil(len(Xtr) / cfg["batch_size"])
    for epoch in range(1, cfg["epochs"] + 1):
        t0 = time.time()
        run_loss, run_correct, seen = 0.0, 0, 0
        for xb, yb in batches(Xtr, ytr, cfg["batch_size"], shuffle=True, gen=gen):
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run_loss += loss.item() * len(xb)
            run_correct += (logits.argmax(1) == yb).sum().item()
            seen += len(xb)
        val_loss, val_acc = evaluate(model, Xva, yva)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{cfg['epochs']}")
        print(f"{steps}/{steps} - {dt:.0f}s {dt / steps * 1000:.0f}ms/step - loss: {run_loss / seen:.4f}"
              f" - accuracy: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")

    val_loss, val_acc = evaluate(model, Xva, yva)
    print(f"final val_loss: {val_loss:.4f}  val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()

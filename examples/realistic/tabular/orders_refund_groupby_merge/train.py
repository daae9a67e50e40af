"""Refund-request propensity model for the e-commerce CX team.

Inputs are two warehouse exports: `customers.csv` (one row per customer, in
signup order, with the refund flag from the support desk) and `orders.csv`
(one row per order). Order history is rolled up per customer, combined with
the customer attributes and fed to a small MLP classifier. Keras-style logs.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

CONFIG = dict(
    seed=7,
    n_customers=5000,
    batch_size=64,
    epochs=20,
    lr=1e-3,
    hidden=256,
    val_frac=0.2,
)

TIERS = ["basic", "plus", "premium"]
REGIONS = ["north", "south", "east", "west", "central"]
CATEGORIES = ["apparel", "electronics", "home", "beauty", "sports", "toys"]
SNAPSHOT = pd.Timestamp("2024-07-01")


def write_exports(out_dir, n, seed):
    rng = np.random.default_rng(seed)
    customer_id = rng.choice(np.arange(100_000, 1_000_000), size=n, replace=False)
    signup = pd.Timestamp("2021-01-01") + pd.to_timedelta(np.sort(rng.integers(0, 3 * 365, size=n)), unit="D")
    tier = rng.choice(len(TIERS), size=n, p=[0.6, 0.3, 0.1])
    region = rng.integers(0, len(REGIONS), size=n)
    opt_in = rng.random(n) < 0.45

    # per-customer propensities for fulfilment problems (courier routes, address quality, ...)
    late_p = 1 / (1 + np.exp(-(-1.6 + 1.1 * rng.normal(size=n) + 0.3 * (region == 2))))
    dmg_p = 1 / (1 + np.exp(-(-2.8 + 1.2 * rng.normal(size=n))))
    fussiness = rng.normal(size=n)
    n_orders = 1 + rng.poisson(5, size=n)

    rows = []
    order_id = 5_000_000
    for i in range(n):
        first = max(signup[i], pd.Timestamp("2023-01-01"))
        span = max((SNAPSHOT - first).days, 1)
        for _ in range(n_orders[i]):
            order_id += 1
            late = rng.random() < late_p[i]
            days_late = int(rng.integers(1, 9)) if late else 0
            damaged = int(rng.random() < dmg_p[i])
            contacts = rng.poisson(0.2 + 0.9 * late + 1.5 * damaged + 0.3 * max(fussiness[i], 0))
            rows.append((order_id, int(customer_id[i]),
                         (first + pd.Timedelta(days=int(rng.integers(0, span)))).date().isoformat(),
                         round(float(rng.lognormal(3.6 + 0.25 * tier[i], 0.6)), 2),
                         int(1 + rng.poisson(1.5)), CATEGORIES[rng.integers(0, len(CATEGORIES))],
                         round(float(rng.choice([0, 0, 0, 5, 10, 15, 20])), 1),
                         days_late, damaged, int(contacts)))
    orders = pd.DataFrame(rows, columns=["order_id", "customer_id", "order_date", "amount", "n_items", "category",
                                         "discount_pct", "days_late", "damaged", "support_contacts"])
    orders = orders.sample(frac=1.0, random_state=seed).reset_index(drop=True)

    g = orders.groupby("customer_id")
    by_id = pd.DataFrame({"late": g["days_late"].apply(lambda s: (s > 0).mean()),
                          "dmg": g["damaged"].mean(),
                          "contacts": g["support_contacts"].mean(),
                          "dlate": g["days_late"].mean()}).loc[customer_id]
    logit = 2.5 * (-2.4 + 2.8 * by_id["late"].to_numpy() + 6.5 * by_id["dmg"].to_numpy()
                   + 0.9 * by_id["contacts"].to_numpy() + 0.15 * by_id["dlate"].to_numpy()
                   + 0.35 * (tier == 2))
    refund = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)

    customers = pd.DataFrame({
        "customer_id": customer_id,
        "signup_date": signup.date.astype(str),
        "tier": np.array(TIERS)[tier],
        "region": np.array(REGIONS)[region],
        "marketing_opt_in": opt_in.astype(int),
        "refund_requested": refund,
    })
    cust_path = os.path.join(out_dir, "customers.csv")
    orders_path = os.path.join(out_dir, "orders.csv")
    customers.to_csv(cust_path, index=False)
    orders.to_csv(orders_path, index=False)
    return cust_path, orders_path


def load_frame(cust_path, orders_path):
    customers = pd.read_csv(cust_path, parse_dates=["signup_date"])
    orders = pd.read_csv(orders_path, parse_dates=["order_date"])
    orders["is_late"] = (orders["days_late"] > 0).astype(float)

    per_customer = orders.groupby("customer_id").agg(
        n_orders=("order_id", "count"),
        total_spend=("amount", "sum"),
        avg_basket=("amount", "mean"),
        avg_items=("n_items", "mean"),
        avg_discount=("discount_pct", "mean"),
        late_rate=("is_late", "mean"),
        avg_days_late=("days_late", "mean"),
        damaged_rate=("damaged", "mean"),
        support_contacts=("support_contacts", "sum"),
        n_categories=("category", "nunique"),
        last_order=("order_date", "max"),
    )
    per_customer = per_customer.reset_index(drop=True)
    df = pd.concat([customers, per_customer], axis=1)

    df["tenure_days"] = (SNAPSHOT - df["signup_date"]).dt.days
    df["days_since_last_order"] = (SNAPSHOT - df["last_order"]).dt.days
    df["contacts_per_order"] = df["support_contacts"] / df["n_orders"]
    return df


NUMERIC = ["n_orders", "total_spend", "avg_basket", "avg_items", "avg_discount", "late_rate", "avg_days_late",
           "damaged_rate", "support_contacts", "contacts_per_order", "n_categories", "tenure_days",
           "days_since_last_order", "marketing_opt_in"]
LOG_COLS = ["total_spend", "avg_basket", "support_contacts"]


def build_tensors(cfg, tmp_dir):
    cust_path, orders_path = write_exports(tmp_dir, cfg["n_customers"], cfg["seed"])
    df = load_frame(cust_path, orders_path)

    num = df[NUMERIC].astype(float).copy()
    num[LOG_COLS] = np.log1p(num[LOG_COLS])
    cats = pd.get_dummies(df[["tier", "region"]], dtype=float)
    y = df["refund_requested"].to_numpy(dtype=np.float32)

    rng = np.random.default_rng(cfg["seed"])
    idx = rng.permutation(len(df))
    n_val = int(len(df) * cfg["val_frac"])
    val_idx, train_idx = idx[:n_val], idx[n_val:]
    mu = num.iloc[train_idx].mean()
    sd = num.iloc[train_idx].std() + 1e-6
    X = pd.concat([(num - mu) / sd, cats], axis=1).to_numpy(dtype=np.float32)

    X_t, y_t = torch.from_numpy(X), torch.from_numpy(y)
    return (X_t[train_idx], y_t[train_idx]), (X_t[val_idx], y_t[val_idx])


class RefundMLP(nn.Module):
    def __init__(self, d_in, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), _ = build_tensors(cfg, tmp)
    model = RefundMLP(X_tr.shape[1], cfg["hidden"])
    bs = cfg["batch_size"]
    data = [(X_tr[i * bs:(i + 1) * bs], y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.Adam(model.parameters(), lr=cfg["lr"]),
            "task": "classification", "num_classes": 2}


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X)
    model.train()
    return criterion(logits, y).item(), ((logits > 0).float() == y).float().mean().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), (X_va, y_va) = build_tensors(cfg, tmp)
    print(f"Train on {len(y_tr)} samples, validate on {len(y_va)} samples "
          f"(positive rate {y_tr.mean().item():.3f}, {X_tr.shape[1]} features)")

    train_dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X_tr, y_tr), batch_size=cfg["batch_size"],
                                           shuffle=True, generator=torch.Generator().manual_seed(cfg["seed"]))
    model = RefundMLP(X_tr.shape[1], cfg["hidden"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    steps = len(train_dl)

    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        tot, correct, n = 0.0, 0.0, 0
        for xb, yb in train_dl:
            logits = model(xb)
            loss = criterion(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += ((logits.detach() > 0).float() == yb).sum().item()
            n += len(yb)
        val_loss, val_acc = evaluate(model, X_va, y_va)
        dt = time.time() - t0
        print(f"Epoch {epoch + 1}/{cfg['epochs']}")
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {tot / n:.4f} - accuracy: {correct / n:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()

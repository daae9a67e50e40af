"""Propensity model: will a subscriber accept the retention offer?

CRM snapshot CSV -> pandas preprocessing (median impute + missing flags,
standardise, one-hot) -> 3-layer MLP with dropout, BCE-with-logits.
Lightning-style console output (hand-rolled loop, no Lightning dependency).
"""
import os
import sys
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

SEED = 2024
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(RUN_DIR, "data", "crm_snapshot.csv")
N_CUSTOMERS = 20000

TARGET = "accepted_offer"
NUM_COLS = ["tenure_months", "monthly_fee", "support_tickets_90d", "logins_30d", "days_since_last_login",
            "discount_pct_offered", "age", "n_devices", "late_payments_12m"]
CAT_COLS = ["plan", "channel", "region", "payment_method"]

BATCH_SIZE = 256
MAX_EPOCHS = 25
LR = 1e-3
WEIGHT_DECAY = 1e-3
DROPOUT = 0.3
PATIENCE = 6


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def simulate_customers(n=N_CUSTOMERS, seed=SEED):
    rng = np.random.default_rng(seed)
    plans = ["basic", "standard", "premium", "family"]
    plan = rng.choice(plans, n, p=[0.35, 0.35, 0.18, 0.12])
    fee = np.array([9.99, 14.99, 22.99, 27.99])[[plans.index(p) for p in plan]] * rng.uniform(0.9, 1.1, n)
    channel = rng.choice(["web", "app", "retail", "partner", "phone"], n, p=[0.4, 0.3, 0.12, 0.1, 0.08])
    region = rng.choice(["north", "south", "east", "west", "metro"], n)
    pay = rng.choice(["card", "paypal", "direct_debit", "invoice"], n, p=[0.5, 0.2, 0.22, 0.08])
    tenure = np.clip(rng.gamma(1.5, 14, n), 1, 120).round()
    tickets = rng.poisson(0.6, n)
    logins = rng.poisson(np.clip(rng.gamma(2.0, 6.0, n), 0.1, None))
    dsll = np.clip(rng.exponential(9.0, n) * (1 + 3 * (logins < 3)), 0, 180).round()
    discount = rng.choice([10, 15, 20, 25, 30, 40], n)
    age = np.clip(rng.normal(39, 13, n), 18, 85).round()
    devices = np.clip(rng.poisson(1.8, n), 1, 8)
    late = rng.poisson(0.25, n)

    logit = (
        -1.05
        + 0.028 * (discount - 20)
        + 0.35 * np.log1p(tenure / 12)
        - 0.012 * dsll
        + 0.03 * np.minimum(logins, 25)
        - 0.18 * tickets
        + 0.25 * (plan == "family") - 0.15 * (plan == "basic")
        + 0.3 * (channel == "app") - 0.2 * (channel == "partner")
        + 0.12 * (pay == "direct_debit")
        - 0.22 * late
        + 0.08 * (devices - 2)
        - 0.006 * np.abs(age - 40)
    )
    p = 1.0 / (1.0 + np.exp(-logit))
    y = (rng.random(n) < p).astype(int)

    df = pd.DataFrame({
        "customer_id": np.arange(n) + 5_000_000, "tenure_months": tenure, "monthly_fee": fee.round(2),
        "support_tickets_90d": tickets, "logins_30d": logins, "days_since_last_login": dsll,
        "discount_pct_offered": discount, "age": age, "n_devices": devices, "late_payments_12m": late,
        "plan": plan, "channel": channel, "region": region, "payment_method": pay, TARGET: y,
    })
    for col, frac in [("age", 0.15), ("days_since_last_login", 0.05), ("logins_30d", 0.05), ("channel", 0.04)]:
        df[col] = df[col].astype(object)
        df.loc[rng.random(n) < frac, col] = np.nan
    return df, p


def load_frame():
    if not os.path.exists(CSV_PATH):
        df, _ = simulate_customers()
        os.makedirs(os.path.dirname(CSV_PATH), exist_ok=True)
        df.to_csv(CSV_PATH, index=False)
    return pd.read_csv(CSV_PATH)


class Preprocessor:
    def fit(self, df):
        num = df[NUM_COLS].astype(float)
        self.medians = num.median()
        filled = num.fillna(self.medians)
        self.mean, self.std = filled.mean(), filled.std().replace(0, 1.0)
        self.miss_cols = [c for c in NUM_COLS if num[c].isna().any()]
        self.dummy_cols = pd.get_dummies(df[CAT_COLS].fillna("unknown"), dtype=np.float32).columns
        return self

    def transform(self, df):
        num = df[NUM_COLS].astype(float)
        flags = num[self.miss_cols].isna().astype(np.float32).add_suffix("_missing")
        num = (num.fillna(self.medians) - self.mean) / self.std
        dummies = pd.get_dummies(df[CAT_COLS].fillna("unknown"), dtype=np.float32)
        dummies = dummies.reindex(columns=self.dummy_cols, fill_value=0.0)
        X = pd.concat([num, flags, dummies], axis=1).to_numpy(np.float32)
        y = df[TARGET].to_numpy(np.float32)
        return torch.tensor(X), torch.tensor(y)


def build_data():
    df = load_frame()
    val_df = df.sample(frac=0.2, random_state=SEED)
    train_df = df.drop(val_df.index)
    prep = Preprocessor().fit(train_df)
    return TensorDataset(*prep.transform(train_df)), TensorDataset(*prep.transform(val_df)), prep


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class PropensityMLP(nn.Module):
    def __init__(self, n_in, hidden=256, dropout=DROPOUT):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden // 2, hidden // 4), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden // 4, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return F.binary_cross_entropy_with_logits(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, _ = build_data()
    model = PropensityMLP(train_ds.tensors[0].shape[1])
    g = torch.Generator().manual_seed(SEED)
    return {
        "model": model,
        "data": DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g),
        "val_data": DataLoader(val_ds, batch_size=2048),
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "binary_classification",
    }


def auroc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def validate(model, loader):
    model.eval()
    logits, ys = [], []
    for x, y in loader:
        logits.append(model(x))
        ys.append(y)
    model.train()
    logits, ys = torch.cat(logits), torch.cat(ys)
    loss = F.binary_cross_entropy_with_logits(logits, ys).item()
    acc = ((logits > 0).float() == ys).float().mean().item()
    return loss, acc, auroc(logits.numpy(), ys.numpy())


def print_summary(model):
    print("  | Name | Type       | Params")
    print("------------------------------------")
    print(f"0 | net  | Sequential | {sum(p.numel() for p in model.parameters()) / 1e3:.1f} K")
    print("------------------------------------")
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"{n / 1e3:.1f} K     Trainable params")
    print(f"{n * 4 / 1e6:.3f}     Total estimated model params size (MB)")


def main():
    torch.manual_seed(SEED)
    train_ds, val_ds, prep = build_data()
    y_tr = train_ds.tensors[1]
    print(f"Loaded {len(train_ds) + len(val_ds)} rows | train {len(train_ds)} | val {len(val_ds)} | "
          f"features {train_ds.tensors[0].shape[1]} | positive rate {y_tr.mean().item():.3f}")
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=2048)

    model = PropensityMLP(train_ds.tensors[0].shape[1])
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2)
    print_summary(model)

    val_loss, val_acc, val_auc = validate(model, val_loader)
    print(f"Sanity Checking DataLoader 0: 100%| val_loss={val_loss:.3f}, val_auroc={val_auc:.3f}")

    best, bad_epochs, t_start = float("inf"), 0, time.time()
    n_batches = len(train_loader)
    for epoch in range(MAX_EPOCHS):
        t0 = time.time()
        running, seen = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item() * len(batch[1])
            seen += len(batch[1])
        train_loss_epoch = running / seen
        val_loss, val_acc, val_auc = validate(model, val_loader)
        scheduler.step(val_loss)
        dt = time.time() - t0
        print(f"Epoch {epoch}: 100%|██████████| {n_batches}/{n_batches} [{dt:.1f}s, {n_batches / dt:.2f}it/s, v_num=0, "
              f"train_loss_step={loss.item():.3f}, val_loss={val_loss:.3f}, val_acc={val_acc:.3f}, "
              f"val_auroc={val_auc:.3f}, train_loss_epoch={train_loss_epoch:.3f}, lr={optimizer.param_groups[0]['lr']:.1e}]")
        if val_loss < best - 1e-4:
            if best < float("inf"):
                print(f"Metric val_loss improved by {best - val_loss:.3f} >= min_delta = 0.0001. New best score: {val_loss:.3f}")
            else:
                print(f"Metric val_loss improved. New best score: {val_loss:.3f}")
            best, bad_epochs = val_loss, 0
        else:
            bad_epochs += 1
            if bad_epochs >= PATIENCE:
                print(f"Monitored metric val_loss did not improve in the last {PATIENCE} records. "
                      f"Best score: {best:.3f}. Signaling Trainer to stop.")
                break
    print(f"`Trainer.fit` stopped after {epoch + 1} epochs ({time.time() - t_start:.1f}s).")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

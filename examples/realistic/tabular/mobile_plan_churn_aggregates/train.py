"""Telco churn model.

customers.csv + plans.csv + six months of usage_monthly.csv, aggregated per
customer (means, last-month values, trend), one-hot plan/contract/payment,
standardised numerics, stratified train/val split. Logs HF-Trainer-style dicts.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")
SEED = 2024

args = dict(
    per_device_train_batch_size=128,
    num_train_epochs=12,
    learning_rate=1e-3,
    weight_decay=1e-4,
    warmup_ratio=0.05,
    logging_steps=50,
    hidden_size=256,
    dropout=0.4,
    val_frac=0.2,
)

ONEHOT_COLS = ["plan_name", "contract", "payment_method", "region"]
NUM_COLS = ["tenure_months", "age", "monthly_fee", "data_cap_gb", "n_support_calls",
            "minutes_mean", "data_gb_mean", "minutes_last", "data_gb_last",
            "data_trend", "overage_months", "dropped_calls_mean", "n_usage_months"]
LABEL = "churned"


# ---------------------------------------------------------------------------
# synthetic extract
# ---------------------------------------------------------------------------
def generate_data(data_dir=DATA_DIR, n=10000, n_months=6, seed=SEED):
    files = ["customers.csv", "plans.csv", "usage_monthly.csv"]
    if all(os.path.exists(os.path.join(data_dir, f)) for f in files):
        return
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(seed)

    plans = pd.DataFrame({
        "plan_id": [1, 2, 3, 4, 5],
        "plan_name": ["basic", "standard", "plus", "unlimited", "family"],
        "monthly_fee": [15.0, 25.0, 35.0, 55.0, 70.0],
        "data_cap_gb": [5, 20, 50, 500, 100],
    })
    cust = pd.DataFrame({
        "customer_id": np.arange(50000, 50000 + n),
        "plan_id": rng.choice(plans["plan_id"], n, p=[.25, .3, .2, .15, .1]),
        "contract": rng.choice(["monthly", "one_year", "two_year"], n, p=[.55, .3, .15]),
        "payment_method": rng.choice(["card", "direct_debit", "invoice"], n, p=[.4, .45, .15]),
        "region": rng.choice(["north", "south", "east", "west", "metro"], n),
        "tenure_months": rng.integers(1, 96, n),
        "age": np.clip(rng.normal(42, 14, n), 18, 90).round(0),
        "n_support_calls": rng.poisson(1.2, n),
    })
    cp = cust.merge(plans, on="plan_id")

    # monthly usage; customers that are about to leave tend to drift down
    engagement = rng.normal(0, 1, n)
    decline = rng.random(n) < 0.15
    slope = np.where(decline, rng.uniform(-0.35, -0.1, n), rng.normal(0, 0.03, n))
    rows = []
    for m in range(n_months):
        # some customers have months missing in the extract
        present = rng.random(n) > 0.04
        level = np.exp(0.3 * engagement + slope * m)
        minutes = (rng.gamma(4, 60, n) * level).round(0)
        data_gb = (cp["data_cap_gb"].clip(upper=60).to_numpy() * 0.5 * level * rng.uniform(0.6, 1.4, n)).round(2)
        dropped = rng.poisson(0.6 + 0.8 * (cp["region"].to_numpy() == "east"), n)
        rows.append(pd.DataFrame({"customer_id": cust["customer_id"], "month": m + 1,
                                  "minutes": minutes, "data_gb": data_gb,
                                  "dropped_calls": dropped})[present])
    usage = pd.concat(rows, ignore_index=True)

    over = (data_gb > cp["data_cap_gb"].to_numpy())
    logit = (
        -3.4
        + 2.2 * decline
        + 1.0 * (cp["contract"] == "monthly") - 0.8 * (cp["contract"] == "two_year")
        + 0.35 * cp["n_support_calls"]
        - 0.012 * cp["tenure_months"]
        + 0.4 * (cp["payment_method"] == "invoice")
        + 0.5 * over
        + 0.35 * (cp["region"] == "east")
        - 0.3 * engagement
    )
    p = 1 / (1 + np.exp(-logit.to_numpy()))
    cust[LABEL] = (rng.random(n) < p).astype(int)

    cust.to_csv(os.path.join(data_dir, "customers.csv"), index=False)
    plans.to_csv(os.path.join(data_dir, "plans.csv"), index=False)
    usage.to_csv(os.path.join(data_dir, "usage_monthly.csv"), index=False)


# ---------------------------------------------------------------------------
# feature pipeline
# ---------------------------------------------------------------------------
def usage_features(usage, plans_by_customer):
    usage = usage.sort_values(["customer_id", "month"])
    g = usage.groupby("customer_id")
    feats = g.agg(minutes_mean=("minutes", "mean"), data_gb_mean=("data_gb", "mean"),
                  dropped_calls_mean=("dropped_calls", "mean"), n_usage_months=("month", "size"))
    last = g.tail(1).set_index("customer_id")
    feats["minutes_last"] = last["minutes"]
    feats["data_gb_last"] = last["data_gb"]

    def slope(df):
        if len(df) < 2:
            return 0.0
        return float(np.polyfit(df["month"], np.log1p(df["data_gb"]), 1)[0])

    feats["data_trend"] = g[["month", "data_gb"]].apply(slope)
    caps = usage["customer_id"].map(plans_by_customer)
    feats["overage_months"] = (usage["data_gb"] > caps).groupby(usage["customer_id"]).sum()
    return feats.reset_index()


def load_frame(data_dir=DATA_DIR):
    generate_data(data_dir)
    cust = pd.read_csv(os.path.join(data_dir, "customers.csv"))
    plans = pd.read_csv(os.path.join(data_dir, "plans.csv"))
    usage = pd.read_csv(os.path.join(data_dir, "usage_monthly.csv"))
    df = cust.merge(plans, on="plan_id", how="left", validate="many_to_one")
    caps = df.set_index("customer_id")["data_cap_gb"]
    uf = usage_features(usage, caps)
    df = df.merge(uf, on="customer_id", how="left", validate="one_to_one")
    df["n_usage_months"] = df["n_usage_months"].fillna(0)
    return df


def stratified_split(df, val_frac=args["val_frac"], seed=SEED):
    rng = np.random.default_rng(seed)
    val_idx = []
    for _, grp in df.groupby(LABEL):
        idx = grp.index.to_numpy()
        val_idx.append(rng.choice(idx, int(round(len(idx) * val_frac)), replace=False))
    is_val = df.index.isin(np.concatenate(val_idx))
    return df[~is_val].reset_index(drop=True), df[is_val].reset_index(drop=True)


class Preprocessor:
    def fit(self, train_df):
        self.levels = {c: sorted(train_df[c].unique()) for c in ONEHOT_COLS}
        num = self._num(train_df)
        self.fill = num.median()
        num = num.fillna(self.fill)
        self.mu, self.sigma = num.mean(), num.std().replace(0, 1.0)
        return self

    def _num(self, df):
        num = df[NUM_COLS].astype(float).copy()
        for c in ["minutes_mean", "data_gb_mean", "minutes_last", "data_gb_last", "data_cap_gb"]:
            num[c] = np.log1p(num[c])
        return num

    def transform(self, df):
        num = (self._num(df).fillna(self.fill) - self.mu) / self.sigma
        oh = [pd.get_dummies(pd.Categorical(df[c], categories=self.levels[c]), prefix=c, dtype=float)
              for c in ONEHOT_COLS]
        X = pd.concat([num.reset_index(drop=True)] + oh, axis=1).to_numpy(np.float32)
        y = df[LABEL].to_numpy(np.float32)
        return torch.from_numpy(X), torch.from_numpy(y)


def build_datasets():
    df = load_frame()
    train_df, val_df = stratified_split(df)
    prep = Preprocessor().fit(train_df)
    return TensorDataset(*prep.transform(train_df)), TensorDataset(*prep.transform(val_df))


def make_loaders(train_ds, val_ds, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    return (DataLoader(train_ds, batch_size=args["per_device_train_batch_size"], shuffle=True, generator=g),
            DataLoader(val_ds, batch_size=1024))


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class ChurnMLP(nn.Module):
    def __init__(self, n_in, hidden=args["hidden_size"], dropout=args["dropout"]):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Dropout(dropout),
        )
        self.head = nn.Linear(hidden // 2, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


def compute_loss(model, batch):
    x, y = batch
    return F.binary_cross_entropy_with_logits(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=args["learning_rate"], weight_decay=args["weight_decay"])


def average_precision(scores, labels):
    order = np.argsort(-scores)
    lab = labels[order]
    tp = np.cumsum(lab)
    precision = tp / np.arange(1, len(lab) + 1)
    return float((precision * lab).sum() / max(lab.sum(), 1))


def roc_auc(scores, labels):
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores)] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@torch.no_grad()
def evaluate(model, val_dl):
    model.eval()
    logits, labels = [], []
    for x, y in val_dl:
        logits.append(model(x))
        labels.append(y)
    model.train()
    logits, labels = torch.cat(logits), torch.cat(labels)
    loss = F.binary_cross_entropy_with_logits(logits, labels).item()
    s, l = logits.numpy(), labels.numpy()
    acc = float(((s > 0).astype(np.float32) == l).mean())
    return {"eval_loss": round(loss, 4), "eval_accuracy": round(acc, 4),
            "eval_auc": round(roc_auc(s, l), 4), "eval_pr_auc": round(average_precision(s, l), 4)}


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds = build_datasets()
    train_dl, _ = make_loaders(train_ds, val_ds)
    it = iter(train_dl)
    data = [next(it) for _ in range(5)]
    model = ChurnMLP(train_ds.tensors[0].shape[1])
    return {"model": model, "data": data, "loss_fn": compute_loss,
            "make_optimizer": make_optimizer, "num_classes": 2, "task": "classification"}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_ds, val_ds = build_datasets()
    train_dl, val_dl = make_loaders(train_ds, val_ds)
    n_in = train_ds.tensors[0].shape[1]
    model = ChurnMLP(n_in)
    optimizer = make_optimizer(model.parameters())
    total = args["num_train_epochs"] * len(train_dl)
    warmup = int(args["warmup_ratio"] * total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / max(warmup, 1), max(0.0, (total - s) / max(total - warmup, 1))))

    print("***** Running training *****")
    print(f"  Num examples = {len(train_ds)}")
    print(f"  Num Epochs = {args['num_train_epochs']}")
    print(f"  Instantaneous batch size per device = {args['per_device_train_batch_size']}")
    print(f"  Total optimization steps = {total}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters())}")
    print(f"  Positive rate (train) = {train_ds.tensors[1].mean().item():.4f}")

    t_start, step, acc_loss, acc_n = time.time(), 0, 0.0, 0
    for epoch in range(args["num_train_epochs"]):
        for batch in train_dl:
            loss = compute_loss(model, batch)
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            acc_loss += loss.item()
            acc_n += 1
            if step % args["logging_steps"] == 0:
                print({"loss": round(acc_loss / acc_n, 4), "learning_rate": scheduler.get_last_lr()[0],
                       "epoch": round(step / len(train_dl), 2)})
                acc_loss, acc_n = 0.0, 0
        metrics = evaluate(model, val_dl)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(total * args["per_device_train_batch_size"] / runtime, 1),
           "train_steps_per_second": round(total / runtime, 2), "epoch": float(args["num_train_epochs"])})


if __name__ == "__main__":
    main()

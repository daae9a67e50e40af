"""Card-transaction fraud classifier: MLP on tabular features.

Synthetic transaction table (written to data/transactions.csv on first run),
standardised numeric features + one-hot merchant category, 3-layer MLP with
dropout, BCE-with-logits, AdamW with linear warmup and linear decay.
Logs Trainer-style dict lines for training and evaluation.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 42
N_ROWS = 80000
BATCH_SIZE = 256
EPOCHS = 12
LR = 2e-3
WEIGHT_DECAY = 1e-4
WARMUP_RATIO = 0.05
LOGGING_STEPS = 50
EVAL_STEPS = 250
HIDDEN = (128, 64)
DROPOUT = 0.1
THRESHOLD = 0.5

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "data", "transactions.csv")
MERCHANT_CATS = ["grocery", "fuel", "restaurant", "online_retail", "electronics", "travel",
                 "pharmacy", "gaming", "jewelry", "utilities"]
NUMERIC = ["amount_log", "hour_sin", "hour_cos", "dist_from_home_km", "tx_last_24h",
           "amount_vs_avg_ratio", "account_age_days", "card_present", "foreign", "new_device"]

torch.set_num_threads(2)


def generate_transactions(n, seed):
    rng = np.random.default_rng(seed)
    hour = rng.integers(0, 24, size=n)
    cat = rng.choice(len(MERCHANT_CATS), size=n,
                     p=[0.22, 0.12, 0.16, 0.18, 0.06, 0.05, 0.08, 0.04, 0.02, 0.07])
    amount = np.exp(rng.normal(3.4, 1.0, size=n) + 0.6 * np.isin(cat, [4, 5, 8]))
    dist = rng.gamma(1.5, 8.0, size=n)
    tx24 = rng.poisson(3.0, size=n)
    avg_amount = amount / np.exp(rng.normal(0.0, 0.4, size=n))
    age = rng.gamma(2.0, 400.0, size=n)
    card_present = (rng.random(n) < np.where(np.isin(cat, [3, 7]), 0.02, 0.75)).astype(int)
    foreign = (rng.random(n) < 0.06).astype(int)
    new_device = (rng.random(n) < 0.08).astype(int)

    night = ((hour <= 4) | (hour >= 23)).astype(float)
    score = (-12.0
             + 2.7 * (np.log(amount) - 3.4)
             + 3.9 * np.log1p(amount / avg_amount)
             + 0.105 * np.minimum(dist, 150)
             + 0.54 * np.maximum(tx24 - 3, 0)
             - 0.0036 * np.minimum(age, 1500)
             - 3.0 * card_present
             + 4.8 * foreign
             + 5.7 * new_device
             + 3.3 * night
             + 3.6 * np.isin(cat, [4, 7, 8]))
    is_fraud = (rng.random(n) < 1.0 / (1.0 + np.exp(-score))).astype(int)
    return pd.DataFrame({
        "tx_id": np.arange(n),
        "hour": hour,
        "merchant_category": np.array(MERCHANT_CATS)[cat],
        "amount": amount.round(2),
        "customer_avg_amount": avg_amount.round(2),
        "dist_from_home_km": dist.round(2),
        "tx_last_24h": tx24,
        "account_age_days": age.round(0),
        "card_present": card_present,
        "foreign": foreign,
        "new_device": new_device,
        "is_fraud": is_fraud,
    })


def load_table():
    if not os.path.exists(CSV_PATH):
        os.makedirs(os.path.dirname(CSV_PATH), exist_ok=True)
        generate_transactions(N_ROWS, SEED).to_csv(CSV_PATH, index=False)
    return pd.read_csv(CSV_PATH)


def featurize(df):
    out = pd.DataFrame(index=df.index)
    out["amount_log"] = np.log1p(df["amount"])
    out["hour_sin"] = np.sin(2 * np.pi * df["hour"] / 24)
    out["hour_cos"] = np.cos(2 * np.pi * df["hour"] / 24)
    out["dist_from_home_km"] = np.log1p(df["dist_from_home_km"])
    out["tx_last_24h"] = df["tx_last_24h"]
    out["amount_vs_avg_ratio"] = np.log(df["amount"] / df["customer_avg_amount"])
    out["account_age_days"] = np.log1p(df["account_age_days"])
    for c in ["card_present", "foreign", "new_device"]:
        out[c] = df[c]
    cats = pd.Categorical(df["merchant_category"], categories=MERCHANT_CATS)
    onehot = pd.get_dummies(cats, prefix="mcc").astype(np.float32)
    onehot.index = df.index
    return pd.concat([out, onehot], axis=1)


def build_datasets():
    df = load_table()
    rng = np.random.default_rng(SEED)
    perm = rng.permutation(len(df))
    n_val = int(0.15 * len(df))
    val_df, train_df = df.iloc[perm[:n_val]], df.iloc[perm[n_val:]]
    x_train, x_val = featurize(train_df), featurize(val_df)
    mean = x_train[NUMERIC].mean()
    std = x_train[NUMERIC].std() + 1e-6
    x_train[NUMERIC] = (x_train[NUMERIC] - mean) / std
    x_val[NUMERIC] = (x_val[NUMERIC] - mean) / std
    to_t = lambda a: torch.tensor(np.asarray(a, dtype=np.float32))
    train_ds = TensorDataset(to_t(x_train.values), to_t(train_df["is_fraud"].values))
    val_ds = TensorDataset(to_t(x_val.values), to_t(val_df["is_fraud"].values))
    return train_ds, val_ds


class FraudMLP(nn.Module):
    def __init__(self, d_in, hidden=HIDDEN, dropout=DROPOUT, prior=None):
        super().__init__()
        layers, d = [], d_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, 1)
        if prior is not None:
            nn.init.constant_(self.head.bias, math.log(prior / (1 - prior)))

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


def compute_loss(model, batch):
    x, y = batch
    return F.binary_cross_entropy_with_logits(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def build_all():
    torch.manual_seed(SEED)
    train_ds, val_ds = build_datasets()
    prior = train_ds.tensors[1].mean().item()
    model = FraudMLP(train_ds.tensors[0].shape[1], prior=prior)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=1024)
    return model, train_loader, val_loader


def make_target():
    model, train_loader, val_loader = build_all()
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def roc_auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return ((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    logits, labels = [], []
    for x, y in loader:
        logits.append(model(x))
        labels.append(y)
    model.train()
    logits, labels = torch.cat(logits), torch.cat(labels)
    loss = F.binary_cross_entropy_with_logits(logits, labels).item()
    probs = torch.sigmoid(logits)
    pred = (probs >= THRESHOLD).float()
    tp = (pred * labels).sum()
    fp = (pred * (1 - labels)).sum()
    fn = ((1 - pred) * labels).sum()
    precision = tp / (tp + fp)
    recall = tp / (tp + fn)
    f1 = 2 * precision * recall / (precision + recall)
    return {
        "eval_loss": round(loss, 4),
        "eval_precision": round(precision.item(), 4),
        "eval_recall": round(recall.item(), 4),
        "eval_f1": round(f1.item(), 4),
        "eval_auc": round(roc_auc(probs, labels), 4),
    }


def main():
    model, train_loader, val_loader = build_all()
    n_train, n_val = len(train_loader.dataset), len(val_loader.dataset)
    print(f"***** Running training *****")
    print(f"  Num examples = {n_train} (fraud rate {train_loader.dataset.tensors[1].mean():.4f})")
    print(f"  Num eval examples = {n_val} (fraud rate {val_loader.dataset.tensors[1].mean():.4f})")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Batch size = {BATCH_SIZE}")
    steps_per_epoch = len(train_loader)
    total_steps = EPOCHS * steps_per_epoch
    print(f"  Total optimization steps = {total_steps}")

    t0 = time.time()
    optimizer = make_optimizer(model.parameters())
    warmup = int(WARMUP_RATIO * total_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total_steps - s) / (total_steps - warmup)))

    metrics = evaluate(model, val_loader)
    print({**metrics, "epoch": 0.0})
    step, running, n_running = 0, 0.0, 0
    for epoch in range(EPOCHS):
        for batch in train_loader:
            loss = compute_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sched.step()
            step += 1
            running += loss.item()
            n_running += 1
            if step % LOGGING_STEPS == 0:
                print({"loss": round(running / n_running, 4), "learning_rate": sched.get_last_lr()[0],
                       "epoch": round(step / steps_per_epoch, 2)})
                running, n_running = 0.0, 0
            if step % EVAL_STEPS == 0:
                metrics = evaluate(model, val_loader)
                print({**metrics, "epoch": round(step / steps_per_epoch, 2)})
    if step % EVAL_STEPS != 0:
        metrics = evaluate(model, val_loader)
        print({**metrics, "epoch": float(EPOCHS)})
    print({"train_runtime": round(time.time() - t0, 2), "train_steps": total_steps, "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()

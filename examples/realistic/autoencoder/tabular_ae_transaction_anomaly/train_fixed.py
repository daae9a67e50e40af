"""Autoencoder anomaly detector for card transactions.

Trained on normal traffic only (reconstruction MSE); at evaluation the
per-row reconstruction error is the anomaly score and we report AUROC on a
held-out mix of normal and flagged transactions.
"""
import json
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
DATA_DIR = "data"
N_NORMAL_TRAIN = 12000
N_NORMAL_VAL = 2000
N_ANOMALY_VAL = 200
BATCH_SIZE = 128
EPOCHS = 15
LR = 1e-3
WEIGHT_DECAY = 1e-4
INPUT_DROPOUT = 0.2      # masking-noise corruption, as in a denoising AE
HIDDEN_DROPOUT = 0.1
LATENT_DIM = 6

torch.set_num_threads(1)

FEATURES = [
    "log_amount", "hour_sin", "hour_cos", "n_items", "merchant_risk",
    "dist_home_km", "dist_last_km", "secs_since_last", "amt_vs_30d_mean",
    "card_age_days", "n_tx_24h", "n_tx_7d", "online_ratio_30d", "foreign_ratio_30d",
    "avg_ticket_30d", "declines_7d",
]


def generate_transactions(n_normal, n_anomaly, seed):
    """Normal rows come from a low-rank customer-behaviour model; anomalies
    break a few of the cross-feature relationships (e.g. a big basket at a
    far-away merchant from a card that rarely travels)."""
    rng = np.random.default_rng(seed)
    d = len(FEATURES)
    mix_rng = np.random.default_rng(12345)  # same behaviour model for every split
    loadings = mix_rng.normal(0, 1, size=(5, d))
    scales = np.exp(mix_rng.normal(0, 0.6, size=d))
    offsets = mix_rng.normal(0, 2, size=d)

    def normal_rows(n):
        z = rng.normal(size=(n, 5))
        x = z @ loadings + 0.25 * rng.normal(size=(n, d))
        return x * scales + offsets

    x_norm = normal_rows(n_normal)
    x_anom = normal_rows(n_anomaly)
    for row in x_anom:
        cols = rng.choice(d, size=3, replace=False)
        row[cols] += rng.choice([-1, 1], size=3) * rng.uniform(1.0, 2.0, size=3) * scales[cols]
    x = np.vstack([x_norm, x_anom]).astype(np.float32)
    y = np.r_[np.zeros(n_normal), np.ones(n_anomaly)].astype(np.int64)
    df = pd.DataFrame(x, columns=FEATURES)
    df["is_fraud"] = y
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def ensure_data():
    os.makedirs(DATA_DIR, exist_ok=True)
    tr_path = os.path.join(DATA_DIR, "train.csv")
    va_path = os.path.join(DATA_DIR, "val.csv")
    if not (os.path.exists(tr_path) and os.path.exists(va_path)):
        generate_transactions(N_NORMAL_TRAIN, 0, SEED).to_csv(tr_path, index=False, float_format="%.5f")
        generate_transactions(N_NORMAL_VAL, N_ANOMALY_VAL, SEED + 1).to_csv(va_path, index=False, float_format="%.5f")
    return pd.read_csv(tr_path), pd.read_csv(va_path)


def build_datasets():
    train_df, val_df = ensure_data()
    mean = train_df[FEATURES].mean()
    std = train_df[FEATURES].std() + 1e-6
    with open(os.path.join(DATA_DIR, "scaler.json"), "w") as f:
        json.dump({"mean": mean.to_dict(), "std": std.to_dict()}, f)
    xtr = torch.tensor(((train_df[FEATURES] - mean) / std).values, dtype=torch.float32)
    xva = torch.tensor(((val_df[FEATURES] - mean) / std).values, dtype=torch.float32)
    yva = torch.tensor(val_df["is_fraud"].values)
    return TensorDataset(xtr), TensorDataset(xva, yva)


def build_loaders():
    train_ds, val_ds = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=512, shuffle=False)
    return train_loader, val_loader


class TabularAE(nn.Module):
    def __init__(self, d_in=len(FEATURES), hidden=64, latent=LATENT_DIM):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Dropout(INPUT_DROPOUT),
            nn.Linear(d_in, hidden), nn.SiLU(), nn.Dropout(HIDDEN_DROPOUT),
            nn.Linear(hidden, hidden // 2), nn.SiLU(),
            nn.Linear(hidden // 2, latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden // 2), nn.SiLU(),
            nn.Linear(hidden // 2, hidden), nn.SiLU(), nn.Dropout(HIDDEN_DROPOUT),
            nn.Linear(hidden, d_in),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def loss_fn(model, batch):
    x = batch[0]
    return F.mse_loss(model(x), x)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def roc_auc(scores, labels):
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels)
    ranks = pd.Series(scores).rank().values
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return (ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    scores, labels = [], []
    for x, y in loader:
        err = ((model(x) - x) ** 2).mean(dim=1)
        scores.append(err)
        labels.append(y)
    scores = torch.cat(scores).numpy()
    labels = torch.cat(labels).numpy()
    normal = scores[labels == 0]
    thr = np.quantile(normal, 0.99)
    recall = (scores[labels == 1] > thr).mean()
    return {
        "eval_loss": round(float(normal.mean()), 4),
        "eval_auroc": round(float(roc_auc(scores, labels)), 4),
        "eval_recall@1%fpr": round(float(recall), 4),
    }


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    it = iter(train_loader)
    data = [next(it) for _ in range(5)]
    return {
        "model": TabularAE(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_loader, val_loader = build_loaders()
    model = TabularAE()
    opt = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(train_loader)
    warmup = 100
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))
    print(f"***** Running training *****\n  Num examples = {len(train_loader.dataset)}\n"
          f"  Num Epochs = {EPOCHS}\n  Batch size = {BATCH_SIZE}\n  Total optimization steps = {total_steps}")
    t0 = time.time()
    step = 0
    best_auroc = 0.0
    for epoch in range(EPOCHS):
        model.train()
        running, cnt = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            running += loss.item()
            cnt += 1
            if step % 45 == 0:
                print({"loss": round(running / cnt, 4), "learning_rate": float(f"{sched.get_last_lr()[0]:.3e}"),
                       "epoch": round(step / len(train_loader), 2)})
                running, cnt = 0.0, 0
        metrics = evaluate(model, val_loader)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
        if metrics["eval_auroc"] > best_auroc:
            best_auroc = metrics["eval_auroc"]
            torch.save(model.state_dict(), "best_ae.pt")
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_steps_per_second": round(step / rt, 2),
           "best_eval_auroc": best_auroc, "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()

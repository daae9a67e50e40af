"""Undercomplete autoencoder for anomaly detection on tabular transaction data.

Trained on normal transactions only; the per-row reconstruction error is the
anomaly score. Regularised with input noise and dropout.
A small generator writes the train/val CSVs on first run.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_CSV = os.path.join(HERE, "transactions_train.csv")
VAL_CSV = os.path.join(HERE, "transactions_val.csv")

N_FEATURES = 18
N_FACTORS = 4
LATENT = 4
BATCH_SIZE = 128
EPOCHS = 60
LR = 2e-3
INPUT_NOISE = 0.1
DROPOUT = 0.2
SEED = 2024


# ----------------------------------------------------------------------------
# data generation (runs once, writes CSVs)
# ----------------------------------------------------------------------------
def _generate(n_normal_train=4000, n_normal_val=1000, n_fraud_val=60, seed=SEED):
    rng = np.random.default_rng(seed)
    W1 = rng.normal(0, 1.0, (N_FACTORS, 16))
    W2 = rng.normal(0, 0.5, (16, N_FEATURES))

    def normal_rows(n):
        f = rng.normal(0, 1, (n, N_FACTORS))
        return np.tanh(f @ W1) @ W2 + rng.normal(0, 0.3, (n, N_FEATURES))

    def fraud_rows(n):
        x = normal_rows(n)
        # fraud breaks the joint structure: a few features drawn from their marginals
        for i in range(n):
            cols = rng.choice(N_FEATURES, size=5, replace=False)
            x[i, cols] = rng.permutation(normal_rows(1)[0] * 1.5)[:5]
        return x

    cols = [f"v{i}" for i in range(N_FEATURES)]
    tr = pd.DataFrame(normal_rows(n_normal_train), columns=cols).round(4)
    tr["is_fraud"] = 0
    va = pd.concat([
        pd.DataFrame(normal_rows(n_normal_val), columns=cols).assign(is_fraud=0),
        pd.DataFrame(fraud_rows(n_fraud_val), columns=cols).assign(is_fraud=1),
    ]).sample(frac=1.0, random_state=seed).round(4)
    tr.to_csv(TRAIN_CSV, index=False)
    va.to_csv(VAL_CSV, index=False)


def load_data():
    if not (os.path.exists(TRAIN_CSV) and os.path.exists(VAL_CSV)):
        _generate()
    tr = pd.read_csv(TRAIN_CSV)
    va = pd.read_csv(VAL_CSV)
    feats = [c for c in tr.columns if c.startswith("v")]
    mean = tr[feats].mean()
    std = tr[feats].std()
    x_tr = torch.tensor(((tr[feats] - mean) / std).to_numpy(), dtype=torch.float32)
    x_va = torch.tensor(((va[feats] - mean) / std).to_numpy(), dtype=torch.float32)
    y_va = va["is_fraud"].to_numpy()
    return x_tr, x_va, y_va


def iterate_batches(x, batch_size, shuffle, generator=None):
    n = x.shape[0]
    idx = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for start in range(0, n, batch_size):
        yield x[idx[start:start + batch_size]]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class TabularAE(nn.Module):
    def __init__(self, d=N_FEATURES, latent=LATENT, p=DROPOUT, noise=INPUT_NOISE):
        super().__init__()
        self.noise = noise
        self.encoder = nn.Sequential(
            nn.Linear(d, 64), nn.ReLU(), nn.Dropout(p),
            nn.Linear(64, 32), nn.ReLU(), nn.Dropout(p),
            nn.Linear(32, latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, 32), nn.ReLU(), nn.Dropout(p),
            nn.Linear(32, 64), nn.ReLU(),
            nn.Linear(64, d),
        )

    def forward(self, x):
        if self.training and self.noise > 0:
            x = x + self.noise * torch.randn_like(x)
        return self.decoder(self.encoder(x))


def compute_loss(model, batch):
    return F.mse_loss(model(batch), batch)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=1e-5)


def roc_auc(scores, labels):
    ranks = pd.Series(scores).rank().to_numpy()
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, x_va, y_va):
    model.eval()
    err = ((model(x_va) - x_va) ** 2).mean(dim=1).numpy()
    model.train()
    normal = y_va == 0
    return float(err[normal].mean()), roc_auc(err, y_va)


def make_target():
    torch.manual_seed(SEED)
    x_tr, _, _ = load_data()
    g = torch.Generator().manual_seed(SEED)
    batches = []
    for i, xb in enumerate(iterate_batches(x_tr, BATCH_SIZE, shuffle=True, generator=g)):
        batches.append(xb)
        if i == 4:
            break
    return {
        "model": TabularAE(),
        "data": batches,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    x_tr, x_va, y_va = load_data()
    print(f"Train on {len(x_tr)} samples, validate on {int((y_va == 0).sum())} normal + "
          f"{int(y_va.sum())} fraud samples")
    model = TabularAE()
    opt = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)
    n_steps = (len(x_tr) + BATCH_SIZE - 1) // BATCH_SIZE
    t_start = time.time()
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        tot = 0.0
        for xb in iterate_batches(x_tr, BATCH_SIZE, shuffle=True, generator=g):
            loss = compute_loss(model, xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
        val_loss, val_auc = evaluate(model, x_va, y_va)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{n_steps}/{n_steps} [==============================] - {dt:.1f}s "
              f"{dt / n_steps * 1000:.0f}ms/step - loss: {tot / n_steps:.4f} - "
              f"val_loss: {val_loss:.4f} - val_auc: {val_auc:.4f}")
    print(f"Training finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()

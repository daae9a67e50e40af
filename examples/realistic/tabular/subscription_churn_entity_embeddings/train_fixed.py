"""Churn model for the subscription product: entity embeddings + MLP on the
customer snapshot joined with aggregated monthly usage."""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import make_data

torch.set_num_threads(1)

DATA_DIR = os.path.dirname(os.path.abspath(__file__))
SEED = 1234
BATCH_SIZE = 256
EPOCHS = 15
LR = 2e-3
WEIGHT_DECAY = 1e-5
VAL_FRAC = 0.2

CAT_COLS = ["plan", "region", "payment_method", "signup_channel"]
NUM_COLS = ["tenure_months", "age", "monthly_charges", "avg_minutes",
            "max_minutes", "total_tickets", "months_active"]
TARGET = "churned"


def load_tables(data_dir=DATA_DIR):
    if not os.path.exists(os.path.join(data_dir, "customers.csv")):
        make_data.generate(out_dir=data_dir)
    customers = pd.read_csv(os.path.join(data_dir, "customers.csv"))
    usage = pd.read_csv(os.path.join(data_dir, "usage_monthly.csv"))
    labels = pd.read_csv(os.path.join(data_dir, "churn_labels.csv"))
    return customers, usage, labels


def build_frame(customers, usage, labels):
    usage_agg = (usage.groupby("customer_id")
                 .agg(avg_minutes=("minutes_streamed", "mean"),
                      max_minutes=("minutes_streamed", "max"),
                      total_tickets=("support_tickets", "sum"),
                      months_active=("month_idx", "count"))
                 .reset_index())
    df = customers.merge(usage_agg, on="customer_id", how="left")
    df = df.merge(labels, on="customer_id", how="inner")
    df[["avg_minutes", "max_minutes"]] = df[["avg_minutes", "max_minutes"]].fillna(0.0)
    df[["total_tickets", "months_active"]] = df[["total_tickets", "months_active"]].fillna(0)
    # heavy-tailed usage -> log scale before standardising
    df["avg_minutes"] = np.log1p(df["avg_minutes"])
    df["max_minutes"] = np.log1p(df["max_minutes"])
    return df


def train_val_split(df, val_frac=VAL_FRAC, seed=SEED):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(df))
    n_val = int(len(df) * val_frac)
    return df.iloc[idx[n_val:]].reset_index(drop=True), df.iloc[idx[:n_val]].reset_index(drop=True)


def preprocess(df, stats=None):
    """Standardise numerics with train statistics and integer-encode categoricals."""
    if stats is None:
        stats = {
            "mean": df[NUM_COLS].mean(),
            "std": df[NUM_COLS].std().replace(0, 1.0),
            "cardinality": {c: df[c].nunique() for c in CAT_COLS},
            "vocab": {c: {v: i for i, v in enumerate(pd.factorize(df[c])[1])} for c in CAT_COLS},
        }
    x_num = ((df[NUM_COLS] - stats["mean"]) / stats["std"]).to_numpy(np.float32)
    x_cat = np.stack([df[c].map(stats["vocab"][c]).fillna(0).to_numpy() for c in CAT_COLS], axis=1).astype(np.int64)
    y = df[TARGET].to_numpy(np.float32)
    return x_num, x_cat, y, stats


def make_loaders(seed=SEED):
    customers, usage, labels = load_tables()
    df = build_frame(customers, usage, labels)
    train_df, val_df = train_val_split(df)
    xn_tr, xc_tr, y_tr, stats = preprocess(train_df)
    xn_va, xc_va, y_va, _ = preprocess(val_df, stats)
    train_ds = TensorDataset(torch.from_numpy(xn_tr), torch.from_numpy(xc_tr), torch.from_numpy(y_tr))
    val_ds = TensorDataset(torch.from_numpy(xn_va), torch.from_numpy(xc_va), torch.from_numpy(y_va))
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=1024, shuffle=False)
    return train_loader, val_loader, stats


class ChurnMLP(nn.Module):
    def __init__(self, cardinalities, n_num, hidden=(128, 64), dropout=0.1):
        super().__init__()
        self.embeddings = nn.ModuleList()
        emb_total = 0
        for n in cardinalities:
            dim = min(8, (n + 1) // 2)
            self.embeddings.append(nn.Embedding(n, dim))
            emb_total += dim
        layers, d_in = [], emb_total + n_num
        for h in hidden:
            layers += [nn.Linear(d_in, h), nn.ReLU(), nn.Dropout(dropout)]
            d_in = h
        layers.append(nn.Linear(d_in, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x_num, x_cat):
        embs = [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
        h = torch.cat(embs + [x_num], dim=1)
        return self.mlp(h).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x_num, x_cat, y = batch
    return criterion(model(x_num, x_cat), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def build_model(stats):
    torch.manual_seed(SEED)
    return ChurnMLP([stats["cardinality"][c] for c in CAT_COLS], len(NUM_COLS))


def roc_auc(y_true, scores):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = y_true.sum()
    n_neg = len(y_true) - n_pos
    return (ranks[y_true == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total, n, all_y, all_s = 0.0, 0, [], []
    for batch in loader:
        x_num, x_cat, y = batch
        logits = model(x_num, x_cat)
        total += criterion(logits, y).item() * len(y)
        n += len(y)
        all_y.append(y.numpy())
        all_s.append(logits.numpy())
    y, s = np.concatenate(all_y), np.concatenate(all_s)
    acc = ((s > 0).astype(np.float32) == y).mean()
    return total / n, roc_auc(y, s), acc


def make_target():
    train_loader, _, stats = make_loaders()
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {
        "model": build_model(stats),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader, stats = make_loaders()
    model = build_model(stats)
    optimizer = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples")
    print(f"Model: ChurnMLP ({n_params:,} params), cardinalities={stats['cardinality']}")
    steps = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        running, seen, ys, ss = 0.0, 0, [], []
        for batch in train_loader:
            optimizer.zero_grad()
            x_num, x_cat, y = batch
            logits = model(x_num, x_cat)
            loss = criterion(logits, y)
            loss.backward()
            optimizer.step()
            running += loss.item() * len(y)
            seen += len(y)
            ys.append(y.numpy())
            ss.append(logits.detach().numpy())
        train_auc = roc_auc(np.concatenate(ys), np.concatenate(ss))
        val_loss, val_auc, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - {dt / steps * 1000:.0f}ms/step - loss: {running / seen:.4f} "
              f"- auc: {train_auc:.4f} - val_loss: {val_loss:.4f} - val_auc: {val_auc:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()

"""Charged-off prediction for consumer loans.

Tabular MLP with entity embeddings for the categorical columns (purpose, branch
and branch attributes) and standardised numeric features. Data comes from the
servicing warehouse export (see make_data.py).
"""
import os
import random
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
DATA_DIR = os.path.dirname(os.path.abspath(__file__))
BATCH_SIZE = 256
EPOCHS = 12
LR = 2e-3
WEIGHT_DECAY = 1e-4

CAT_COLS = ["purpose", "branch_id", "region", "branch_size"]
NUM_COLS = ["annual_income", "loan_amount", "term_months", "credit_score", "employment_years",
            "open_accounts", "delinq_2y", "local_unemployment", "dti"]
LOG_COLS = ["annual_income", "loan_amount"]
TARGET = "defaulted"


# ----------------------------------------------------------------------------- data

def load_frame():
    parts = [pd.read_csv(os.path.join(DATA_DIR, f)) for f in ("loans_charged_off.csv", "loans_performing.csv")]
    loans = pd.concat(parts, ignore_index=True)
    branches = pd.read_csv(os.path.join(DATA_DIR, "branches.csv"))
    df = loans.merge(branches, on="branch_id", how="left", validate="many_to_one")
    df["dti"] = df["loan_amount"] / df["annual_income"]
    for c in LOG_COLS:
        df[c] = np.log1p(df[c])
    return df


def split_frame(df, val_frac=0.2):
    val_df = df.sample(frac=val_frac, random_state=SEED)
    train_df = df.drop(val_df.index)
    return train_df, val_df


class Preprocessor:
    """Fit vocabularies and scaling on the training frame, apply to any frame."""

    def fit(self, df):
        # index 0 is reserved for categories not seen in training
        self.vocabs = {c: {v: i + 1 for i, v in enumerate(sorted(df[c].astype(str).unique()))} for c in CAT_COLS}
        self.mean = df[NUM_COLS].mean()
        self.std = df[NUM_COLS].std().replace(0, 1.0)
        return self

    @property
    def cardinalities(self):
        return [len(self.vocabs[c]) + 1 for c in CAT_COLS]

    def transform(self, df):
        x_cat = np.stack([df[c].astype(str).map(self.vocabs[c]).fillna(0).astype(np.int64).values for c in CAT_COLS], 1)
        x_num = ((df[NUM_COLS] - self.mean) / self.std).values.astype(np.float32)
        y = df[TARGET].values.astype(np.float32)
        return torch.from_numpy(x_num), torch.from_numpy(x_cat), torch.from_numpy(y)


def epoch_batches(tensors, batch_size, rng):
    """Cut the training tensors into minibatches and return them in random order."""
    perm = list(range(len(tensors[0])))
    rng.shuffle(perm)
    perm = torch.tensor(perm)
    batches = list(zip(*(t[perm].split(batch_size) for t in tensors)))
    return batches


def build_datasets():
    df = load_frame()
    train_df, val_df = split_frame(df)
    prep = Preprocessor().fit(train_df)
    return prep, prep.transform(train_df), prep.transform(val_df)


# ----------------------------------------------------------------------------- model

def emb_dim(card):
    return min(16, (card + 1) // 2)


class TabularMLP(nn.Module):
    def __init__(self, cardinalities, n_num, hidden=(128, 64), dropout=0.1):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(c, emb_dim(c)) for c in cardinalities])
        d_in = n_num + sum(emb_dim(c) for c in cardinalities)
        layers = []
        for h in hidden:
            layers += [nn.Linear(d_in, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            d_in = h
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Linear(d_in, 1)

    def forward(self, x_num, x_cat):
        embs = [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
        h = torch.cat([x_num] + embs, dim=1)
        return self.head(self.mlp(h)).squeeze(-1)


def loss_fn(model, batch):
    x_num, x_cat, y = batch
    return F.binary_cross_entropy_with_logits(model(x_num, x_cat), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def roc_auc(y_true, scores):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = y_true.sum()
    n_neg = len(y_true) - n_pos
    return (ranks[y_true == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, val):
    model.eval()
    x_num, x_cat, y = val
    logits = model(x_num, x_cat)
    loss = F.binary_cross_entropy_with_logits(logits, y).item()
    auc = roc_auc(y.numpy(), logits.numpy())
    acc = ((logits > 0).float() == y).float().mean().item()
    return loss, auc, acc


def make_target():
    torch.manual_seed(SEED)
    prep, train, _ = build_datasets()
    model = TabularMLP(prep.cardinalities, n_num=len(NUM_COLS))
    batches = epoch_batches(train, BATCH_SIZE, random.Random(SEED))
    return {
        "model": model,
        "data": batches[:6],
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = random.Random(SEED)
    prep, train, val = build_datasets()
    print(f"train rows: {len(train[2])}  val rows: {len(val[2])}  positive rate: {train[2].mean():.3f}")
    print(f"embedding cardinalities: {dict(zip(CAT_COLS, prep.cardinalities))}")

    model = TabularMLP(prep.cardinalities, n_num=len(NUM_COLS))
    print(f"model params: {sum(p.numel() for p in model.parameters()):,}")
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS, eta_min=LR * 0.05)

    steps_per_epoch = (len(train[2]) + BATCH_SIZE - 1) // BATCH_SIZE
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        running = 0.0
        for batch in epoch_batches(train, BATCH_SIZE, rng):
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.item()
        sched.step()
        val_loss, val_auc, val_acc = evaluate(model, val)
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {time.time() - t0:.1f}s - loss: {running / steps_per_epoch:.4f}"
              f" - val_loss: {val_loss:.4f} - val_auc: {val_auc:.4f} - val_accuracy: {val_acc:.4f}"
              f" - lr: {sched.get_last_lr()[0]:.2e}")

    torch.save(model.state_dict(), os.path.join(DATA_DIR, "loan_mlp.pt"))


if __name__ == "__main__":
    main()

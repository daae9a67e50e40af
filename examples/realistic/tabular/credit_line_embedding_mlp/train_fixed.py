"""Loan default classifier with entity embeddings.

applications.csv is joined to branches.csv (branch metadata) and
employers.csv (sector / size per employer); categorical ids go through
learned embeddings, numeric columns are standardised on the train split.
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
SEED = 1234

HPARAMS = {
    "batch_size": 512,
    "max_epochs": 15,
    "lr": 3e-3,
    "weight_decay": 1e-4,
    "hidden": [64, 32],
    "dropout": 0.2,
    "val_frac": 0.2,
}

CAT_COLS = ["branch_id", "employer_id", "loan_purpose", "state", "sector"]
NUM_COLS = ["amount", "term_months", "income", "dti", "credit_score",
            "years_employed", "branch_staff", "employer_headcount"]
LABEL = "defaulted"


# ---------------------------------------------------------------------------
# synthetic extract
# ---------------------------------------------------------------------------
def generate_data(data_dir=DATA_DIR, n=30000, seed=SEED):
    paths = [os.path.join(data_dir, f) for f in ("applications.csv", "branches.csv", "employers.csv")]
    if all(os.path.exists(p) for p in paths):
        return
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(seed)

    states = [f"S{i:02d}" for i in range(40)]
    n_branch, n_emp = 160, 400
    branches = pd.DataFrame({
        "branch_id": [f"B{i:04d}" for i in range(n_branch)],
        "state": rng.choice(states, n_branch),
        "branch_staff": rng.integers(4, 60, n_branch),
    })
    sectors = ["retail", "health", "construction", "hospitality", "public", "tech",
               "manufacturing", "transport", "education", "finance", "agri", "other"]
    employers = pd.DataFrame({
        "employer_id": [f"E{i:05d}" for i in range(n_emp)],
        "sector": rng.choice(sectors, n_emp),
        "employer_headcount": np.exp(rng.normal(4.5, 1.4, n_emp)).round(0),
    })
    purposes = ["car", "home_improvement", "debt_consolidation", "medical", "wedding",
                "business", "education", "holiday", "other"]

    apps = pd.DataFrame({
        "application_id": np.arange(n),
        "branch_id": rng.choice(branches["branch_id"], n),
        "employer_id": rng.choice(employers["employer_id"], n),
        "loan_purpose": rng.choice(purposes, n),
        "amount": np.exp(rng.normal(np.log(9000), 0.7, n)).round(-1),
        "term_months": rng.choice([12, 24, 36, 48, 60], n),
        "income": np.exp(rng.normal(np.log(38000), 0.45, n)).round(-2),
        "dti": np.clip(rng.normal(0.28, 0.12, n), 0.0, 0.95).round(3),
        "credit_score": np.clip(rng.normal(680, 70, n), 300, 850).round(0),
        "years_employed": np.clip(rng.exponential(5.0, n), 0, 40).round(1),
    })

    # latent risk: strong per-branch / per-employer / per-state effects
    branch_eff = dict(zip(branches["branch_id"], rng.normal(0, 1.0, n_branch)))
    emp_eff = dict(zip(employers["employer_id"], rng.normal(0, 0.9, n_emp)))
    state_eff = dict(zip(states, rng.normal(0, 0.6, len(states))))
    sector_eff = dict(zip(sectors, rng.normal(0, 0.5, len(sectors))))
    purpose_eff = dict(zip(purposes, rng.normal(0, 0.5, len(purposes))))

    m = apps.merge(branches, on="branch_id").merge(employers, on="employer_id")
    m = m.sort_values("application_id")
    logit = (
        -1.6
        + m["branch_id"].map(branch_eff) + m["employer_id"].map(emp_eff)
        + m["state"].map(state_eff) + m["sector"].map(sector_eff)
        + m["loan_purpose"].map(purpose_eff)
        + 0.8 * np.log(m["amount"] / m["income"] * 4)
        + 3.0 * (m["dti"] - 0.28)
        - 0.012 * (m["credit_score"] - 680)
        - 0.05 * m["years_employed"]
        + 0.01 * (m["term_months"] - 36)
    )
    p = 1.0 / (1.0 + np.exp(-logit.to_numpy()))
    apps[LABEL] = (rng.random(n) < p).astype(int)

    apps.to_csv(paths[0], index=False)
    branches.to_csv(paths[1], index=False)
    employers.to_csv(paths[2], index=False)


# ---------------------------------------------------------------------------
# preprocessing
# ---------------------------------------------------------------------------
def load_frame(data_dir=DATA_DIR):
    generate_data(data_dir)
    apps = pd.read_csv(os.path.join(data_dir, "applications.csv"))
    branches = pd.read_csv(os.path.join(data_dir, "branches.csv"))
    employers = pd.read_csv(os.path.join(data_dir, "employers.csv"))
    df = (apps.merge(branches, on="branch_id", how="left", validate="many_to_one")
              .merge(employers, on="employer_id", how="left", validate="many_to_one"))
    return df


def train_val_split(df, val_frac=HPARAMS["val_frac"], seed=SEED):
    rng = np.random.default_rng(seed)
    is_val = rng.random(len(df)) < val_frac
    return df[~is_val].reset_index(drop=True), df[is_val].reset_index(drop=True)


class TabularPreprocessor:
    """Category -> index maps (0 reserved for unseen) and numeric standardisation."""

    LOG_COLS = ["amount", "income", "employer_headcount"]

    def fit(self, df):
        self.vocab = {c: {v: i + 1 for i, v in enumerate(sorted(df[c].astype(str).unique()))}
                      for c in CAT_COLS}
        num = self._numeric(df)
        self.mean, self.std = num.mean(), num.std().replace(0, 1.0)
        return self

    def _numeric(self, df):
        num = df[NUM_COLS].astype(np.float64).copy()
        for c in self.LOG_COLS:
            num[c] = np.log1p(num[c])
        return num

    @property
    def cardinalities(self):
        return [len(self.vocab[c]) + 1 for c in CAT_COLS]

    def transform(self, df):
        cats = np.stack([df[c].astype(str).map(self.vocab[c]).fillna(0).astype(np.int64).to_numpy()
                         for c in CAT_COLS], axis=1)
        num = ((self._numeric(df) - self.mean) / self.std).fillna(0.0).to_numpy(np.float32)
        y = df[LABEL].to_numpy(np.float32)
        return torch.from_numpy(cats), torch.from_numpy(num), torch.from_numpy(y)


def build_datasets():
    df = load_frame()
    train_df, val_df = train_val_split(df)
    prep = TabularPreprocessor().fit(train_df)
    train_ds = TensorDataset(*prep.transform(train_df))
    val_ds = TensorDataset(*prep.transform(val_df))
    return train_ds, val_ds, prep


def make_loaders(train_ds, val_ds, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    train_dl = DataLoader(train_ds, batch_size=HPARAMS["batch_size"], shuffle=True,
                          drop_last=True, generator=g)
    val_dl = DataLoader(val_ds, batch_size=2048)
    return train_dl, val_dl


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
def emb_dim(card):
    # fastai-style rule of thumb
    return int(min(16, round(1.6 * card ** 0.56)))


class EntityEmbeddingNet(nn.Module):
    def __init__(self, cardinalities, n_num, hidden=HPARAMS["hidden"], dropout=HPARAMS["dropout"]):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(card, emb_dim(card)) for card in cardinalities])
        self.emb_drop = nn.Dropout(0.05)
        self.num_bn = nn.BatchNorm1d(n_num)
        layers, d = [], sum(emb_dim(c) for c in cardinalities) + n_num
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x_cat, x_num):
        emb = torch.cat([e(x_cat[:, i]) for i, e in enumerate(self.embeddings)], dim=1)
        x = torch.cat([self.emb_drop(emb), self.num_bn(x_num)], dim=1)
        return self.mlp(x).squeeze(-1)


def compute_loss(model, batch):
    x_cat, x_num, y = batch
    logits = model(x_cat, x_num)
    return F.binary_cross_entropy_with_logits(logits, y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=HPARAMS["lr"], weight_decay=HPARAMS["weight_decay"])


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def validate(model, val_dl):
    model.eval()
    tot, n, scores, labels = 0.0, 0, [], []
    for x_cat, x_num, y in val_dl:
        logits = model(x_cat, x_num)
        tot += F.binary_cross_entropy_with_logits(logits, y, reduction="sum").item()
        n += len(y)
        scores.append(logits.numpy())
        labels.append(y.numpy())
    model.train()
    return tot / n, roc_auc(np.concatenate(scores), np.concatenate(labels))


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, prep = build_datasets()
    train_dl, _ = make_loaders(train_ds, val_ds)
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    model = EntityEmbeddingNet(prep.cardinalities, len(NUM_COLS))
    return {"model": model, "data": data, "loss_fn": compute_loss,
            "make_optimizer": make_optimizer, "num_classes": 2, "task": "classification"}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_ds, val_ds, prep = build_datasets()
    train_dl, val_dl = make_loaders(train_ds, val_ds)
    pos_rate = train_ds.tensors[2].mean().item()
    print(f"[data] train={len(train_ds)} val={len(val_ds)} default_rate={pos_rate:.3f}")
    print(f"[data] cardinalities: {dict(zip(CAT_COLS, prep.cardinalities))}")

    model = EntityEmbeddingNet(prep.cardinalities, len(NUM_COLS))
    optimizer = make_optimizer(model.parameters())
    total_steps = HPARAMS["max_epochs"] * len(train_dl)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=HPARAMS["lr"],
                                                    total_steps=total_steps, pct_start=0.25)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"[model] EntityEmbeddingNet  trainable params: {n_params:,}")

    step = 0
    for epoch in range(HPARAMS["max_epochs"]):
        t0 = time.time()
        run_loss = 0.0
        for batch in train_dl:
            optimizer.zero_grad()
            loss = compute_loss(model, batch)
            loss.backward()
            optimizer.step()
            scheduler.step()
            run_loss += loss.item()
            step += 1
        val_loss, val_auc = validate(model, val_dl)
        print(f"Epoch {epoch}: 100%|{len(train_dl)}/{len(train_dl)} [{time.time() - t0:.1f}s] "
              f"step={step}, train_loss={run_loss / len(train_dl):.4f}, val_loss={val_loss:.4f}, "
              f"val_auc={val_auc:.4f}, lr={scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()

"""Mixed-type tabular autoencoder for card-transaction anomaly scoring.

Numeric columns are log/standardised and reconstructed with MSE, categorical
columns go through embeddings and are reconstructed with per-column softmax
heads. The per-row reconstruction loss is used as the anomaly score; the
validation file carries a small set of labelled suspicious transactions.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_CSV = os.path.join(HERE, "transactions_train.csv")
VAL_CSV = os.path.join(HERE, "transactions_val.csv")

NUMERIC = ["amount", "distance_km", "n_items"]
CYCLIC = ["hour"]
CATEGORICAL = ["merchant_category", "channel", "country", "card_type"]

MERCHANTS = ["grocery", "fuel", "restaurant", "electronics", "travel", "pharmacy",
             "clothing", "online_marketplace", "utilities", "jewelry", "gaming", "cash_advance"]
CHANNELS = ["chip_pos", "contactless", "ecommerce", "atm"]
COUNTRIES = ["DE", "FR", "NL", "ES", "IT", "GB", "US", "BR"]
CARD_TYPES = ["debit", "credit", "prepaid"]

BATCH_SIZE = 128
EPOCHS = 20
LR = 2e-3
LATENT_DIM = 6
SEED = 7


# ----------------------------------------------------------------------------
# synthetic data (written once to CSV, like an export from the warehouse)
# ----------------------------------------------------------------------------
def _simulate(n, rng):
    # customer segments drive which merchants / channels / amounts co-occur
    n_seg = 6
    seg = rng.integers(0, n_seg, size=n)
    merch_pref = rng.dirichlet(np.full(len(MERCHANTS), 0.25), size=n_seg)
    chan_pref = rng.dirichlet(np.full(len(CHANNELS), 0.4), size=n_seg)
    ctry_pref = rng.dirichlet(np.full(len(COUNTRIES), 0.3), size=n_seg)
    card_pref = rng.dirichlet(np.full(len(CARD_TYPES), 0.6), size=n_seg)
    seg_amount = rng.normal(3.2, 0.9, size=n_seg)
    seg_dist = rng.normal(1.5, 0.8, size=n_seg)
    seg_hour = rng.uniform(8, 21, size=n_seg)

    def pick(prefs, names):
        u = rng.random(n)[:, None]
        idx = (u > np.cumsum(prefs[seg], axis=1)).sum(1)
        return np.array(names)[np.minimum(idx, len(names) - 1)]

    merchant = pick(merch_pref, MERCHANTS)
    channel = pick(chan_pref, CHANNELS)
    country = pick(ctry_pref, COUNTRIES)
    card = pick(card_pref, CARD_TYPES)
    m_idx = np.array([MERCHANTS.index(m) for m in merchant])
    amount = np.exp(seg_amount[seg] + 0.15 * m_idx + rng.normal(0, 0.35, n))
    distance = np.exp(seg_dist[seg] + rng.normal(0, 0.4, n)) + 0.1 * (channel == "atm")
    n_items = np.maximum(1, np.round(amount / rng.uniform(8, 25, n))).astype(int)
    hour = np.mod(np.round(seg_hour[seg] + rng.normal(0, 2.0, n)), 24).astype(int)

    return pd.DataFrame({
        "txn_id": np.arange(n),
        "amount": amount.round(2),
        "distance_km": distance.round(2),
        "n_items": n_items,
        "hour": hour,
        "merchant_category": merchant,
        "channel": channel,
        "country": country,
        "card_type": card,
        "is_fraud": np.zeros(n, dtype=int),
    })


def ensure_csvs():
    if os.path.exists(TRAIN_CSV) and os.path.exists(VAL_CSV):
        return
    rng = np.random.default_rng(2024)
    full = _simulate(8000, rng)
    # segments are fixed by the rng state, so draw train and val from one population
    train = full.iloc[:6000].reset_index(drop=True)
    val = full.iloc[6000:].reset_index(drop=True)
    k = int(0.05 * len(val))
    idx = rng.choice(len(val), size=k, replace=False)
    val.loc[idx, "is_fraud"] = 1
    # account-takeover style records: amount/time look like the customer, but the
    # merchant / channel / country mix is lifted from unrelated customers
    for col in ["merchant_category", "channel", "country"]:
        donors = rng.choice(len(val), size=k, replace=False)
        val.loc[idx, col] = val.loc[donors, col].to_numpy()
    train.to_csv(TRAIN_CSV, index=False)
    val.to_csv(VAL_CSV, index=False)


# ----------------------------------------------------------------------------
# preprocessing
# ----------------------------------------------------------------------------
def numeric_block(df):
    x = np.log1p(df[NUMERIC].to_numpy(dtype=np.float64))
    ang = 2 * np.pi * df["hour"].to_numpy(dtype=np.float64) / 24.0
    return np.concatenate([x, np.sin(ang)[:, None], np.cos(ang)[:, None]], axis=1)


def fit_numeric_scaler(df):
    x = numeric_block(df)
    return x.mean(0), x.std(0) + 1e-6


def fit_category_vocab(df):
    return {c: pd.Index(pd.factorize(df[c])[1]) for c in CATEGORICAL}


def encode_categoricals(df, vocab):
    # integer codes per categorical column for the embedding tables
    return np.stack([vocab[c].get_indexer(df[c]) for c in CATEGORICAL], axis=1)


def load_split(path, scaler, vocab):
    df = pd.read_csv(path)
    mean, std = scaler
    x_num = (numeric_block(df) - mean) / std
    x_cat = encode_categoricals(df, vocab)
    y = df["is_fraud"].to_numpy()
    return (torch.tensor(x_num, dtype=torch.float32),
            torch.tensor(x_cat, dtype=torch.long),
            torch.tensor(y, dtype=torch.long))


def build_datasets():
    ensure_csvs()
    train_df = pd.read_csv(TRAIN_CSV)
    scaler = fit_numeric_scaler(train_df)
    vocab = fit_category_vocab(train_df)
    train = load_split(TRAIN_CSV, scaler, vocab)
    val = load_split(VAL_CSV, scaler, vocab)
    cardinalities = [int(train[1][:, j].max()) + 1 for j in range(len(CATEGORICAL))]
    return train, val, cardinalities


def make_loaders(train, val):
    g = torch.Generator().manual_seed(SEED)
    train_ds = TensorDataset(train[0], train[1])
    val_ds = TensorDataset(val[0], val[1], val[2])
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=512, shuffle=False)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class TabularAutoencoder(nn.Module):
    def __init__(self, n_numeric, cardinalities, latent_dim=LATENT_DIM, hidden=64):
        super().__init__()
        self.emb_dims = [min(8, (c + 1) // 2) for c in cardinalities]
        self.embeddings = nn.ModuleList(nn.Embedding(c, d) for c, d in zip(cardinalities, self.emb_dims))
        d_in = n_numeric + sum(self.emb_dims)
        self.encoder = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, latent_dim),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.num_head = nn.Linear(hidden, n_numeric)
        self.cat_heads = nn.ModuleList(nn.Linear(hidden, c) for c in cardinalities)

    def forward(self, x_num, x_cat):
        embs = [emb(x_cat[:, j]) for j, emb in enumerate(self.embeddings)]
        z = self.encoder(torch.cat([x_num] + embs, dim=1))
        h = self.decoder(z)
        return self.num_head(h), [head(h) for head in self.cat_heads]


def row_losses(model, x_num, x_cat):
    num_hat, cat_logits = model(x_num, x_cat)
    num_err = ((num_hat - x_num) ** 2).mean(1)
    cat_err = torch.stack([F.cross_entropy(lg, x_cat[:, j], reduction="none")
                           for j, lg in enumerate(cat_logits)], dim=1).mean(1)
    return num_err, cat_err


def compute_loss(model, batch):
    x_num, x_cat = batch[0], batch[1]
    num_err, cat_err = row_losses(model, x_num, x_cat)
    return num_err.mean() + cat_err.mean()


def roc_auc(scores, labels):
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels)
    order = scores.argsort()
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return (ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, n, scores, labels = 0.0, 0, [], []
    for x_num, x_cat, y in loader:
        num_err, cat_err = row_losses(model, x_num, x_cat)
        per_row = num_err + cat_err
        normal = y == 0
        tot += per_row[normal].sum().item()
        n += int(normal.sum())
        scores.append(per_row.numpy())
        labels.append(y.numpy())
    model.train()
    return tot / n, roc_auc(np.concatenate(scores), np.concatenate(labels))


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=1e-5)


def build_model(cardinalities, n_numeric):
    torch.manual_seed(SEED)
    return TabularAutoencoder(n_numeric, cardinalities)


def make_target():
    train, val, cards = build_datasets()
    train_loader, _ = make_loaders(train, val)
    batches = []
    for i, b in enumerate(train_loader):
        batches.append(b)
        if i == 4:
            break
    return {
        "model": build_model(cards, train[0].shape[1]),
        "data": batches,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train, val, cards = build_datasets()
    train_loader, val_loader = make_loaders(train, val)
    model = build_model(cards, train[0].shape[1])
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Train on {len(train[0])} samples, validate on {len(val[0])} samples "
          f"(val frauds: {int(val[2].sum())})")
    print(f"categorical cardinalities: {dict(zip(CATEGORICAL, cards))}  params: {n_params}")
    steps = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        run_num = run_cat = 0.0
        for x_num, x_cat in train_loader:
            num_err, cat_err = row_losses(model, x_num, x_cat)
            loss = num_err.mean() + cat_err.mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            run_num += num_err.mean().item()
            run_cat += cat_err.mean().item()
        scheduler.step()
        val_loss, val_auc = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - loss: {(run_num + run_cat) / steps:.4f} - "
              f"num_mse: {run_num / steps:.4f} - cat_ce: {run_cat / steps:.4f} - "
              f"val_loss: {val_loss:.4f} - val_auc: {val_auc:.4f}")


if __name__ == "__main__":
    main()

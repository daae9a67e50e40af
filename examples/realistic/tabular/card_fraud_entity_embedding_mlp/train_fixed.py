"""Card-transaction fraud scoring with an entity-embedding MLP.

data/transactions.csv   labelled authorisations (chargeback-confirmed fraud flag)
data/card_history.csv   90-day unlabelled authorisation history per card
data/merchants.csv      merchant master data (MCC, country)
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 2024
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
N_CARDS = 3000
N_MERCHANTS = 600
N_TX = 40000
BATCH_SIZE = 512
EPOCHS = 12
LR = 2e-3
WARMUP_RATIO = 0.05
LOG_EVERY = 40
FOCAL_GAMMA = 2.0
FOCAL_ALPHA = 0.25

COUNTRIES = ["DE", "FR", "NL", "BE", "ES", "IT", "PL", "GB", "US", "TR", "NG", "BR"]
MCCS = [5411, 5812, 5541, 5999, 4121, 5732, 5311, 4511, 7011, 5944, 6051, 7995, 4829, 5967, 5691, 5912]
CAT_COLS = ["mcc", "channel", "merchant_country", "hour"]
NUM_COLS = ["log_amount", "amount_vs_card_mean", "card_tx_count_90d", "is_foreign", "merchant_new_for_card",
            "card_age_days", "minutes_since_prev_tx"]
TARGET = "is_fraud"


def write_raw_data(data_dir=DATA_DIR, seed=SEED):
    os.makedirs(data_dir, exist_ok=True)
    paths = [os.path.join(data_dir, f) for f in ("transactions.csv", "card_history.csv", "merchants.csv")]
    if all(os.path.exists(p) for p in paths):
        return paths
    rng = np.random.default_rng(seed)
    home = rng.choice(COUNTRIES[:8], N_CARDS, p=[0.3, 0.2, 0.12, 0.08, 0.1, 0.1, 0.05, 0.05])
    card_scale = np.exp(rng.normal(3.4, 0.6, N_CARDS))
    traveller = rng.random(N_CARDS) < 0.30
    card_age = rng.integers(10, 3000, N_CARDS)
    merchants = pd.DataFrame({
        "merchant_id": np.arange(N_MERCHANTS) + 10000,
        "mcc": rng.choice(MCCS, N_MERCHANTS),
        "merchant_country": rng.choice(COUNTRIES, N_MERCHANTS,
                                       p=[0.28, 0.16, 0.1, 0.06, 0.08, 0.08, 0.04, 0.06, 0.06, 0.03, 0.02, 0.03]),
    })
    m_country = merchants["merchant_country"].to_numpy()
    m_mcc = merchants["mcc"].to_numpy()

    # unlabelled history
    nh = 90000
    h_card = rng.integers(0, N_CARDS, nh)
    domestic = np.flatnonzero(m_country == "DE")
    h_merch = rng.integers(0, N_MERCHANTS, nh)
    hist = pd.DataFrame({
        "card_id": h_card + 1_000_000,
        "merchant_id": h_merch + 10000,
        "amount": (card_scale[h_card] * np.exp(rng.normal(0, 0.7, nh))).round(2),
    })

    # labelled transactions
    n = N_TX
    card = rng.integers(0, N_CARDS, n)
    fraud_card_risk = 1.0 / (1.0 + np.exp(-(-3.3 + 0.0005 * (1500 - card_age[card]))))
    fraud = rng.random(n) < fraud_card_risk * 1.15
    merch = rng.integers(0, N_MERCHANTS, n)
    risky_merchants = np.flatnonzero(np.isin(m_mcc, [5732, 5944, 6051, 7995, 4829, 5967]) | ~np.isin(m_country, COUNTRIES[:8]))
    merch[fraud] = np.where(rng.random(fraud.sum()) < 0.7, rng.choice(risky_merchants, fraud.sum()), merch[fraud])
    trav_abroad = traveller[card] & (rng.random(n) < 0.6) & ~fraud
    foreign_merch = np.flatnonzero(~np.isin(m_country, COUNTRIES[:3]))
    merch[trav_abroad] = rng.choice(foreign_merch, trav_abroad.sum())
    amount = card_scale[card] * np.exp(rng.normal(0, 0.7, n))
    amount[fraud] *= np.exp(rng.normal(1.3, 0.8, fraud.sum()))
    amount[trav_abroad] *= np.exp(rng.normal(1.3, 0.6, trav_abroad.sum()))
    hour = rng.choice(24, n, p=np.r_[np.full(6, 0.01), np.full(18, 0.94 / 18)])
    hour[fraud] = rng.choice(24, fraud.sum())
    hour[trav_abroad] = rng.choice(24, trav_abroad.sum())
    channel = rng.choice(["chip", "contactless", "ecom"], n, p=[0.4, 0.35, 0.25])
    channel[fraud] = rng.choice(["chip", "contactless", "ecom"], fraud.sum(), p=[0.1, 0.15, 0.75])
    gap = np.exp(rng.normal(6.5, 1.5, n))
    gap[fraud] = np.exp(rng.normal(3.5, 1.5, fraud.sum()))
    gap[trav_abroad] = np.exp(rng.normal(4.5, 1.5, trav_abroad.sum()))
    # label noise from chargeback process
    y = fraud.copy()
    y[rng.random(n) < 0.002] = True
    y[fraud & (rng.random(n) < 0.08)] = False
    tx = pd.DataFrame({
        "tx_id": np.arange(n) + 70_000_000,
        "card_id": card + 1_000_000,
        "card_home_country": home[card],
        "card_age_days": card_age[card],
        "merchant_id": merch + 10000,
        "amount": amount.round(2),
        "hour": hour,
        "channel": channel,
        "minutes_since_prev_tx": gap.round(1),
        TARGET: y.astype(int),
    })
    tx.to_csv(paths[0], index=False)
    hist.to_csv(paths[1], index=False)
    merchants.to_csv(paths[2], index=False)
    return paths


def load_frame():
    tx_path, hist_path, merch_path = write_raw_data()
    tx = pd.read_csv(tx_path)
    hist = pd.read_csv(hist_path)
    merchants = pd.read_csv(merch_path)
    card_stats = hist.groupby("card_id").agg(card_mean_amount=("amount", "mean"),
                                             card_tx_count_90d=("amount", "size")).reset_index()
    seen = hist[["card_id", "merchant_id"]].drop_duplicates().assign(seen_before=1)
    df = (tx.merge(merchants, on="merchant_id", how="left", validate="many_to_one")
            .merge(card_stats, on="card_id", how="left", validate="many_to_one")
            .merge(seen, on=["card_id", "merchant_id"], how="left", validate="many_to_one"))
    df["card_tx_count_90d"] = df["card_tx_count_90d"].fillna(0)
    df["card_mean_amount"] = df["card_mean_amount"].fillna(df["amount"])
    df["merchant_new_for_card"] = df["seen_before"].isna().astype(float)
    df["log_amount"] = np.log1p(df["amount"])
    df["amount_vs_card_mean"] = np.log(df["amount"] / df["card_mean_amount"])
    df["is_foreign"] = (df["merchant_country"] != df["card_home_country"]).astype(float)
    df["minutes_since_prev_tx"] = np.log1p(df["minutes_since_prev_tx"])
    return df


class TxDataset(Dataset):
    def __init__(self, cats, nums, y):
        self.cats = torch.as_tensor(cats, dtype=torch.long)
        self.nums = torch.as_tensor(nums, dtype=torch.float32)
        self.y = torch.tensor(y, dtype=torch.float32)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.cats[i], self.nums[i], self.y[i]


def build_data():
    df = load_frame()
    # card-disjoint split so the val score reflects unseen cards
    cards = np.sort(df["card_id"].unique())
    rng = np.random.default_rng(SEED)
    val_cards = rng.choice(cards, size=int(0.2 * len(cards)), replace=False)
    is_val = df["card_id"].isin(val_cards).to_numpy()
    train_df, val_df = df[~is_val], df[is_val]

    vocab = {c: {v: i + 1 for i, v in enumerate(sorted(train_df[c].unique()))} for c in CAT_COLS}
    mu = train_df[NUM_COLS].mean()
    sd = train_df[NUM_COLS].std() + 1e-6

    def encode(frame):
        cats = np.stack([frame[c].map(vocab[c]).fillna(0).astype(int).to_numpy() for c in CAT_COLS], axis=1)
        nums = ((frame[NUM_COLS] - mu) / sd).to_numpy(np.float32)
        return TxDataset(cats, nums, frame[TARGET].to_numpy())

    cardinalities = [len(vocab[c]) + 1 for c in CAT_COLS]
    return encode(train_df), encode(val_df), cardinalities, float(train_df[TARGET].mean())


class FraudNet(nn.Module):
    def __init__(self, cardinalities, n_num, emb_dim=8, hidden=128, dropout=0.1, prior=0.03):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(n, min(emb_dim, (n + 1) // 2)) for n in cardinalities])
        d_emb = sum(e.embedding_dim for e in self.embeddings)
        self.mlp = nn.Sequential(
            nn.Linear(d_emb + n_num, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, 1),
        )
        nn.init.constant_(self.mlp[-1].bias, -math.log((1 - prior) / prior))

    def forward(self, cats, nums):
        e = [emb(cats[:, i]) for i, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat(e + [nums], dim=1)).squeeze(-1)


class FocalLoss(nn.Module):
    def __init__(self, gamma=FOCAL_GAMMA, alpha=FOCAL_ALPHA):
        super().__init__()
        self.gamma = gamma
        self.alpha = alpha

    def forward(self, logits, targets):
        ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        p = torch.sigmoid(logits)
        p_t = p * targets + (1 - p) * (1 - targets)
        alpha_t = self.alpha * targets + (1 - self.alpha) * (1 - targets)
        return (alpha_t * (1 - p_t) ** self.gamma * ce).mean()


criterion = FocalLoss()


def loss_fn(model, batch):
    cats, nums, y = batch
    return criterion(model(cats, nums), y)


def roc_auc(y, s):
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    n_pos = y.sum()
    return (ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (len(y) - n_pos))


def average_precision(y, s):
    order = np.argsort(-s, kind="mergesort")
    y = y[order]
    tp = np.cumsum(y)
    precision = tp / np.arange(1, len(y) + 1)
    return float((precision * y).sum() / y.sum())


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    logits, ys, loss_sum = [], [], 0.0
    for cats, nums, y in loader:
        out = model(cats, nums)
        loss_sum += criterion(out, y).item() * len(y)
        logits.append(out)
        ys.append(y)
    model.train()
    logits, ys = torch.cat(logits), torch.cat(ys)
    y_np, s_np = ys.numpy(), logits.numpy()
    return {
        "eval_loss": round(loss_sum / len(ys), 4),
        "eval_auc": round(float(roc_auc(y_np, s_np)), 4),
        "eval_ap": round(average_precision(y_np, s_np), 4),
    }


def make_loaders(train_ds, val_ds):
    g = torch.Generator().manual_seed(SEED)
    tr = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    va = DataLoader(val_ds, batch_size=4096)
    return tr, va


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, cards, prior = build_data()
    tr, va = make_loaders(train_ds, val_ds)
    model = FraudNet(cards, len(NUM_COLS), prior=prior)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    return {"model": model, "data": tr, "val_data": va, "loss_fn": loss_fn, "optimizer": optimizer,
            "num_classes": 2, "task": "classification"}


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_ds, val_ds, cards, prior = build_data()
    tr, va = make_loaders(train_ds, val_ds)
    print(f"***** Running training *****\n  Num examples = {len(train_ds)}\n  Num eval examples = {len(val_ds)}\n"
          f"  Fraud rate = {prior:.4f}\n  Num Epochs = {EPOCHS}\n  Batch size = {BATCH_SIZE}\n"
          f"  Total optimization steps = {EPOCHS * len(tr)}")
    model = FraudNet(cards, len(NUM_COLS), prior=prior)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    total = EPOCHS * len(tr)
    warmup = int(WARMUP_RATIO * total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
    step, t0, running, n_run = 0, time.time(), 0.0, 0
    for epoch in range(EPOCHS):
        for batch in tr:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            n_run += 1
            if step % LOG_EVERY == 0:
                print({"loss": round(running / n_run, 4), "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / len(tr), 2)})
                running, n_run = 0.0, 0
        metrics = evaluate(model, va)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    print({"train_runtime": round(time.time() - t0, 2), "train_steps_per_second": round(step / (time.time() - t0), 2),
           "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()

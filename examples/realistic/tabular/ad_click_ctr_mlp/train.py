"""Click-through-rate model for display ads.

Reads the impression log (CSV), one-hot encodes the categorical columns,
standardises the numeric ones with train statistics, and fits a small MLP
with BCE. Log format mimics Keras' `model.fit(..., verbose=2)`.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
HERE = os.path.dirname(os.path.abspath(__file__))
DATA_PATH = os.path.join(HERE, "data", "impressions.csv")

N_ROWS = 60_000
BATCH_SIZE = 256
EPOCHS = 14
LR = 1e-3
WEIGHT_DECAY = 1e-5

CAT_COLS = ["device", "placement", "country", "ad_category", "weekday"]
NUM_COLS = ["hour", "user_age", "past_clicks_30d", "past_impressions_30d",
            "session_seconds", "ad_width", "bid_price"]
TARGET = "clicked"


def generate_impressions(path, n=N_ROWS, seed=SEED):
    """Simulate an impression log. Clicks are mostly chance; features carry a weak signal."""
    rng = np.random.default_rng(seed)
    device = rng.choice(["mobile", "desktop", "tablet"], n, p=[0.62, 0.31, 0.07])
    placement = rng.choice(["top_banner", "sidebar", "in_feed", "footer", "interstitial"], n,
                           p=[0.25, 0.2, 0.35, 0.12, 0.08])
    country = rng.choice(["US", "DE", "FR", "GB", "BR", "IN", "JP", "other"], n,
                         p=[0.3, 0.1, 0.08, 0.1, 0.1, 0.12, 0.05, 0.15])
    ad_category = rng.choice(["retail", "travel", "finance", "gaming", "auto", "food"], n)
    weekday = rng.choice(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], n)
    hour = rng.integers(0, 24, n)
    user_age = np.clip(rng.normal(36, 12, n), 16, 85).round()
    past_impr = rng.poisson(40, n) + rng.poisson(rng.gamma(1.0, 60, n))
    user_ctr = rng.beta(1.2, 14, n)
    past_clicks = rng.binomial(past_impr, user_ctr)
    session_seconds = rng.lognormal(4.2, 1.0, n).round(1)
    ad_width = rng.choice([300, 320, 468, 728, 970], n)
    bid_price = rng.gamma(2.0, 0.6, n).round(3)

    logit = np.full(n, -2.35)
    logit += np.select([placement == "in_feed", placement == "interstitial", placement == "footer"],
                       [0.25, 0.35, -0.3], 0.0)
    logit += np.where(device == "mobile", 0.12, 0.0)
    logit += 0.35 * (user_ctr - user_ctr.mean()) / user_ctr.std()
    logit += 0.10 * np.sin(2 * np.pi * (hour - 14) / 24)
    logit += np.where((ad_category == "gaming") & (user_age < 30), 0.3, 0.0)
    logit += -0.08 * (np.log(session_seconds) - 4.2)
    p = 1.0 / (1.0 + np.exp(-logit))
    clicked = rng.binomial(1, p)

    df = pd.DataFrame({
        "impression_id": np.arange(n), "device": device, "placement": placement,
        "country": country, "ad_category": ad_category, "weekday": weekday,
        "hour": hour, "user_age": user_age, "past_clicks_30d": past_clicks,
        "past_impressions_30d": past_impr, "session_seconds": session_seconds,
        "ad_width": ad_width, "bid_price": bid_price, TARGET: clicked,
    })
    # a few missing values, as in any real log
    miss = rng.random(n) < 0.03
    df.loc[miss, "user_age"] = np.nan
    os.makedirs(os.path.dirname(path), exist_ok=True)
    df.to_csv(path, index=False)


def load_data(path=DATA_PATH, val_frac=0.2, seed=SEED):
    if not os.path.exists(path):
        generate_impressions(path)
    df = pd.read_csv(path)

    # feature engineering
    df["user_age"] = df["user_age"].fillna(df["user_age"].median())
    df["past_clicks_30d"] = np.log1p(df["past_clicks_30d"])
    df["past_impressions_30d"] = np.log1p(df["past_impressions_30d"])
    df["session_seconds"] = np.log1p(df["session_seconds"])
    df["hour_sin"] = np.sin(2 * np.pi * df["hour"] / 24)
    df["hour_cos"] = np.cos(2 * np.pi * df["hour"] / 24)
    num_cols = [c for c in NUM_COLS if c != "hour"] + ["hour_sin", "hour_cos"]

    # stratified-ish random split
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(df))
    n_val = int(len(df) * val_frac)
    val_df, train_df = df.iloc[idx[:n_val]].copy(), df.iloc[idx[n_val:]].copy()

    # scaling with train statistics only
    mu = train_df[num_cols].mean()
    sd = train_df[num_cols].std().replace(0, 1.0)
    for part in (train_df, val_df):
        part[num_cols] = (part[num_cols] - mu) / sd

    # one-hot with categories fixed from the train split
    cats = {c: sorted(train_df[c].unique()) for c in CAT_COLS}
    def encode(part):
        dummies = [pd.get_dummies(pd.Categorical(part[c], categories=cats[c]), prefix=c, dtype=np.float32)
                   for c in CAT_COLS]
        X = pd.concat([part[num_cols].reset_index(drop=True).astype(np.float32)] +
                      [d.reset_index(drop=True) for d in dummies], axis=1)
        y = part[TARGET].to_numpy(dtype=np.float32)
        return X, y

    X_tr, y_tr = encode(train_df)
    X_va, y_va = encode(val_df)
    return X_tr, y_tr, X_va, y_va


class CTRNet(nn.Module):
    def __init__(self, in_dim, hidden=(128, 64), dropout=0.2):
        super().__init__()
        layers, d = [], in_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    xb, yb = batch
    return criterion(model(xb), yb)


def build_loaders(X_tr, y_tr, X_va, y_va):
    g = torch.Generator().manual_seed(SEED)
    train_ds = TensorDataset(torch.from_numpy(X_tr.to_numpy()), torch.from_numpy(y_tr))
    val_ds = TensorDataset(torch.from_numpy(X_va.to_numpy()), torch.from_numpy(y_va))
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=2048, shuffle=False)
    return train_loader, val_loader


def build_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def roc_auc(y_true, y_score):
    y_true = np.asarray(y_true)
    ranks = pd.Series(y_score).rank().to_numpy()
    n_pos = y_true.sum()
    n_neg = len(y_true) - n_pos
    return float((ranks[y_true == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    losses, scores, ys = [], [], []
    for xb, yb in loader:
        logits = model(xb)
        losses.append(criterion(logits, yb).item() * len(yb))
        scores.append(torch.sigmoid(logits).numpy())
        ys.append(yb.numpy())
    model.train()
    y, s = np.concatenate(ys), np.concatenate(scores)
    return sum(losses) / len(y), roc_auc(y, s), y, s


def make_target():
    torch.manual_seed(SEED)
    X_tr, y_tr, X_va, y_va = load_data()
    train_loader, val_loader = build_loaders(X_tr, y_tr, X_va, y_va)
    model = CTRNet(X_tr.shape[1])
    optimizer = build_optimizer(model.parameters())
    return {"model": model, "data": train_loader, "val_data": val_loader, "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": 2, "task": "classification"}


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    X_tr, y_tr, X_va, y_va = load_data()
    print(f"train: {X_tr.shape}, val: {X_va.shape}, positive rate train={y_tr.mean():.4f} val={y_va.mean():.4f}")
    train_loader, val_loader = build_loaders(X_tr, y_tr, X_va, y_va)
    model = CTRNet(X_tr.shape[1])
    optimizer = build_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=1)

    steps = len(train_loader)
    best_val, best_state = float("inf"), None
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        run_loss, n_seen = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            run_loss += loss.item() * len(batch[1])
            n_seen += len(batch[1])
        tr_loss = run_loss / n_seen
        val_loss, val_auc, _, _ = evaluate(model, val_loader)
        scheduler.step(val_loss)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - loss: {tr_loss:.4f} - val_loss: {val_loss:.4f} - val_auc: {val_auc:.4f}"
              f" - lr: {optimizer.param_groups[0]['lr']:.2e}")
        if val_loss < best_val:
            best_val = val_loss
            best_state = {k: v.clone() for k, v in model.state_dict().items()}

    model.load_state_dict(best_state)
    val_loss, val_auc, y, s = evaluate(model, val_loader)
    p0 = float(y_tr.mean())
    base_loss = float(-(y * np.log(p0) + (1 - y) * np.log(1 - p0)).mean())
    print(f"\nbest checkpoint: val_loss={val_loss:.4f} val_auc={val_auc:.4f}")
    print(f"constant predictor (train CTR {p0:.4f}): val_loss={base_loss:.4f} val_auc=0.5000")
    print(f"relative logloss improvement over base rate: {100 * (1 - val_loss / base_loss):.2f}%")

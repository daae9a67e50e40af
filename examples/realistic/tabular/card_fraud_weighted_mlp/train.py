"""Card-transaction fraud scorer.

Inputs are the authorisation log for the last 30 days and the 90-day card
profile from the feature store. Features: amount relative to the card's usual
spend, time since the card's previous authorisation, channel / merchant group,
hour of day, geo mismatch, card tenure. Fraud is ~1% of traffic, so the BCE
loss is weighted by pos_weight = n_legit / n_fraud. The last 7 days are held
out for validation; AUC and average precision are the metrics we report to the
fraud-ops team (the alert threshold is tuned later on the PR curve).
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 11
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(RUN_DIR, "data")
AUTH_CSV = os.path.join(DATA_DIR, "authorisations.csv")
PROFILE_CSV = os.path.join(DATA_DIR, "card_profile_90d.csv")

N_CARDS = 4000
N_TXNS = 42000
N_DAYS = 30
VAL_DAYS = 7

MCC_GROUPS = ["grocery", "fuel", "restaurants", "travel", "electronics", "jewelry",
              "gift_cards", "pharmacy", "apparel", "utilities", "entertainment", "other"]
MCC_RISK = {"grocery": -0.6, "fuel": 0.1, "restaurants": -0.4, "travel": 0.5, "electronics": 1.2,
            "jewelry": 1.3, "gift_cards": 1.6, "pharmacy": -0.5, "apparel": 0.3, "utilities": -1.0,
            "entertainment": 0.0, "other": 0.0}
CHANNELS = ["chip", "contactless", "online", "atm"]
TIERS = ["classic", "gold", "platinum", "business"]

BATCH_SIZE = 512
EPOCHS = 14
LR = 1e-3
WEIGHT_DECAY = 1e-5
EVAL_EVERY = 100


def write_exports(seed=SEED):
    rng = np.random.default_rng(seed)
    os.makedirs(DATA_DIR, exist_ok=True)
    card_ids = np.array([f"c{x:07d}" for x in rng.choice(10 ** 7, N_CARDS, replace=False)])
    profile = pd.DataFrame({
        "card_id": card_ids,
        "card_tier": rng.choice(TIERS, N_CARDS, p=[.5, .25, .1, .15]),
        "account_age_days": rng.gamma(2.0, 500, N_CARDS).round().clip(3, None),
        "avg_amount_90d": np.exp(rng.normal(3.6, 0.7, N_CARDS)).round(2),
        "txn_count_90d": rng.poisson(45, N_CARDS) + 1,
        "online_share_90d": rng.beta(2, 5, N_CARDS).round(3),
    })
    profile.to_csv(PROFILE_CSV, index=False)

    card_idx = rng.integers(0, N_CARDS, N_TXNS)
    ts = pd.Timestamp("2024-09-01") + pd.to_timedelta(np.sort(rng.uniform(0, N_DAYS * 86400, N_TXNS)), unit="s")
    hour = ts.hour.to_numpy()
    online = rng.random(N_TXNS) < profile["online_share_90d"].to_numpy()[card_idx]
    channel = np.where(online, "online", rng.choice(["chip", "contactless", "atm"], N_TXNS, p=[.45, .45, .10]))
    mcc = rng.choice(MCC_GROUPS, N_TXNS, p=[.2, .1, .14, .04, .05, .02, .02, .06, .09, .08, .08, .12])
    amount = profile["avg_amount_90d"].to_numpy()[card_idx] * np.exp(rng.normal(0, 0.8, N_TXNS))
    mismatch = rng.random(N_TXNS) < 0.03
    distance = np.where(mismatch, rng.gamma(2, 900, N_TXNS), rng.gamma(1.2, 6, N_TXNS))

    order = np.lexsort((ts.to_numpy(), card_idx))
    gap = np.full(N_TXNS, np.nan)
    same = card_idx[order][1:] == card_idx[order][:-1]
    dt = np.diff(ts.to_numpy()[order]).astype("timedelta64[s]").astype(float)
    gap[order[1:][same]] = dt[same]
    gap_h = np.nan_to_num(gap / 3600, nan=24 * 30)

    age = profile["account_age_days"].to_numpy()[card_idx]
    night = ((hour >= 0) & (hour < 5)).astype(float)
    logit = (-5.2 + 1.9 * mismatch + 1.0 * online + 1.1 * np.clip(np.log(amount / profile["avg_amount_90d"].to_numpy()[card_idx]), 0, None)
             + np.array([MCC_RISK[m] for m in mcc]) + 1.0 * night + 0.9 * (gap_h < 0.25) - 0.35 * np.log1p(age / 365)
             + 0.4 * (channel == "atm"))
    fraud = rng.random(N_TXNS) < 1 / (1 + np.exp(-logit))
    amount = np.where(fraud & (rng.random(N_TXNS) < 0.5), amount * rng.uniform(1.5, 4.0, N_TXNS), amount)

    auth = pd.DataFrame({
        "txn_id": np.arange(5_000_000, 5_000_000 + N_TXNS),
        "card_id": card_ids[card_idx],
        "auth_ts": ts.strftime("%Y-%m-%d %H:%M:%S"),
        "amount": amount.round(2),
        "mcc_group": mcc,
        "channel": channel,
        "country_mismatch": mismatch.astype(int),
        "distance_km": distance.round(1),
        "is_fraud": fraud.astype(int),
    })
    auth.to_csv(AUTH_CSV, index=False)


def load_frame():
    if not os.path.exists(AUTH_CSV):
        write_exports()
    auth = pd.read_csv(AUTH_CSV, parse_dates=["auth_ts"])
    profile = pd.read_csv(PROFILE_CSV)
    df = auth.merge(profile, on="card_id", how="left", validate="many_to_one")

    df = df.sort_values(["card_id", "auth_ts"])
    prev = df.groupby("card_id")["auth_ts"].shift(1)
    df["hours_since_prev"] = (df["auth_ts"] - prev).dt.total_seconds().div(3600).fillna(24 * 30)
    df = df.sort_values("auth_ts").reset_index(drop=True)

    df["log_amount"] = np.log1p(df["amount"])
    df["amount_vs_card"] = np.log(df["amount"] / df["avg_amount_90d"])
    df["log_gap"] = np.log1p(df["hours_since_prev"])
    df["log_distance"] = np.log1p(df["distance_km"])
    df["log_age"] = np.log1p(df["account_age_days"])
    hour = df["auth_ts"].dt.hour + df["auth_ts"].dt.minute / 60
    df["hour_sin"] = np.sin(2 * math.pi * hour / 24)
    df["hour_cos"] = np.cos(2 * math.pi * hour / 24)
    return df


NUM_FEATURES = ["log_amount", "amount_vs_card", "log_gap", "log_distance", "log_age", "hour_sin",
                "hour_cos", "country_mismatch", "online_share_90d", "txn_count_90d"]
ONEHOT = {"mcc_group": MCC_GROUPS, "channel": CHANNELS, "card_tier": TIERS}


def to_matrix(df, mean, std):
    num = ((df[NUM_FEATURES] - mean) / std).to_numpy(np.float32)
    oh = [pd.Categorical(df[c], categories=cats).codes for c, cats in ONEHOT.items()]
    oh = [np.eye(len(cats), dtype=np.float32)[codes] for codes, cats in zip(oh, ONEHOT.values())]
    return np.hstack([num] + oh)


def build_data():
    df = load_frame()
    cutoff = df["auth_ts"].max().normalize() - pd.Timedelta(days=VAL_DAYS - 1)
    tr, va = df[df["auth_ts"] < cutoff], df[df["auth_ts"] >= cutoff]
    mean, std = tr[NUM_FEATURES].mean(), tr[NUM_FEATURES].std()
    x_tr, x_va = to_matrix(tr, mean, std), to_matrix(va, mean, std)
    y_tr = tr["is_fraud"].to_numpy(np.float32)
    y_va = va["is_fraud"].to_numpy(np.float32)
    return (torch.from_numpy(x_tr), torch.from_numpy(y_tr)), (torch.from_numpy(x_va), torch.from_numpy(y_va))


class FraudMLP(nn.Module):
    def __init__(self, d_in, hidden=64, dropout=0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, 1),
        )

    def init_output_bias(self, prior):
        # start from the base rate instead of p=0.5 (avoids the huge first-steps loss)
        nn.init.constant_(self.net[-1].bias, math.log(prior / (1 - prior)))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def make_criterion(y_train):
    n_pos = float(y_train.sum())
    pos_weight = torch.tensor((len(y_train) - n_pos) / n_pos)
    return nn.BCEWithLogitsLoss(pos_weight=pos_weight)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def setup():
    torch.manual_seed(SEED)
    (x_tr, y_tr), (x_va, y_va) = build_data()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=BATCH_SIZE, shuffle=True, generator=g)
    model = FraudMLP(x_tr.shape[1])
    model.init_output_bias(float(y_tr.mean()))
    criterion = make_criterion(y_tr)

    def loss_fn(model, batch):
        x, y = batch
        return criterion(model(x), y)

    return model, train_loader, (x_va, y_va), criterion, loss_fn


def make_target():
    model, train_loader, val, criterion, loss_fn = setup()
    return {
        "model": model,
        "data": train_loader,
        "val_data": [val],
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def auc_ap(y, s):
    order = np.argsort(-s, kind="mergesort")
    y = y[order]
    tp = np.cumsum(y)
    fp = np.cumsum(1 - y)
    n_pos, n_neg = tp[-1], fp[-1]
    tpr = np.concatenate([[0], tp / n_pos])
    fpr = np.concatenate([[0], fp / n_neg])
    auc = np.trapezoid(tpr, fpr)
    precision = tp / np.arange(1, len(y) + 1)
    ap = float(np.sum(precision * y) / n_pos)
    return float(auc), ap


@torch.no_grad()
def evaluate(model, val, criterion):
    model.eval()
    x, y = val
    logits = model(x)
    loss = criterion(logits, y).item()
    model.train()
    prob = torch.sigmoid(logits).numpy()
    yn = y.numpy()
    pred = prob >= 0.5
    acc = float((pred == (yn == 1)).mean())
    recall = float(pred[yn == 1].mean())
    auc, ap = auc_ap(yn, prob)
    return loss, acc, recall, auc, ap


def main():
    torch.set_num_threads(1)
    t_start = time.time()
    model, train_loader, val, criterion, loss_fn = setup()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=6, gamma=0.3)
    y_tr = train_loader.dataset.tensors[1]
    print(f"train: {len(y_tr)} auths, {int(y_tr.sum())} fraud ({y_tr.mean():.2%}) | "
          f"val: {len(val[1])} auths, {int(val[1].sum())} fraud ({val[1].mean():.2%})")
    print(f"pos_weight={criterion.pos_weight.item():.1f}  features={val[0].shape[1]}  "
          f"all-legit val accuracy={1 - val[1].mean():.4f}")

    def log_eval(step, epoch, train_loss):
        vl, acc, rec, auc, ap = evaluate(model, val, criterion)
        tl = f"{train_loss:.4f}" if train_loss is not None else "   -  "
        print(f"step {step:5d} | epoch {epoch:2d} | train_loss {tl} | val_loss {vl:.4f} | val_acc {acc:.4f} "
              f"| val_recall@0.5 {rec:.3f} | val_auc {auc:.4f} | val_ap {ap:.4f} | lr {optimizer.param_groups[0]['lr']:.1e}")

    log_eval(0, 0, None)
    step, window = 0, []
    for epoch in range(1, EPOCHS + 1):
        for batch in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            step += 1
            window.append(loss.item())
            if step % EVAL_EVERY == 0:
                log_eval(step, epoch, float(np.mean(window)))
                window = []
        scheduler.step()
    log_eval(step, EPOCHS, float(np.mean(window)) if window else None)
    torch.save(model.state_dict(), os.path.join(RUN_DIR, "fraud_mlp.pt"))
    print(f"finished {EPOCHS} epochs / {step} steps in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()

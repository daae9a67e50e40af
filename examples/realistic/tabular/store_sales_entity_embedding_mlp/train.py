"""Daily unit-sales forecasting for the retail chain.

Entity-embedding MLP (store / weekday / month / format embeddings + lag
features) trained on the daily POS export. Target is log1p(units), evaluated
on the last 90 days of the export (time-based hold-out).
"""
import logging
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_PATH = os.path.join(HERE, "data", "daily_sales.csv")
DATE_FMT = "%d/%m/%Y"

SEED = 7
N_STORES = 40
START, END = "2021-01-01", "2022-12-31"
VAL_DAYS = 90
BATCH_SIZE = 256
EPOCHS = 12
LR = 2e-3
WEIGHT_DECAY = 1e-5

NUMERIC = ["lag_1", "lag_7", "roll_mean_7", "promo", "holiday"]
CATEGORICAL = ["store_id", "dow", "month", "store_type"]

log = logging.getLogger("sales")


# --------------------------------------------------------------------------
# synthetic POS export (stands in for the nightly dump from the data lake)
# --------------------------------------------------------------------------
def write_export(path, seed=SEED):
    rng = np.random.default_rng(seed)
    dates = pd.date_range(START, END, freq="D")
    n_days = len(dates)
    store_base = rng.normal(4.2, 0.45, N_STORES)
    store_type = rng.choice(["hyper", "super", "express"], N_STORES, p=[0.2, 0.5, 0.3])
    region = rng.choice(["north", "south", "east", "west"], N_STORES)
    dow_eff = np.array([-0.10, -0.12, -0.08, -0.02, 0.12, 0.28, 0.05])
    month_eff = 0.08 * np.sin(2 * np.pi * (dates.month.values - 3) / 12)
    holidays = set(rng.choice(n_days, 18, replace=False))

    frames = []
    for s in range(N_STORES):
        ar = np.zeros(n_days)
        for t in range(1, n_days):
            ar[t] = 0.95 * ar[t - 1] + rng.normal(0, 0.11)
        promo = (rng.random(n_days) < 0.12).astype(int)
        hol = np.array([1 if t in holidays else 0 for t in range(n_days)])
        mu = (store_base[s] + dow_eff[dates.day_of_week.values] + month_eff
              + 0.25 * promo - 0.35 * hol + ar)
        units = rng.poisson(np.exp(mu + rng.normal(0, 0.05, n_days)))
        frames.append(pd.DataFrame({
            "date": dates.strftime(DATE_FMT),
            "store_id": s + 101,
            "region": region[s],
            "store_type": store_type[s],
            "promo": promo,
            "holiday": hol,
            "units": units,
            "_day": np.arange(n_days),
        }))
    df = pd.concat(frames, ignore_index=True)
    # the warehouse exports day by day, all stores for a day together
    df = df.sort_values(["_day", "store_id"]).drop(columns="_day").reset_index(drop=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    df.to_csv(path, index=False)


# --------------------------------------------------------------------------
# preprocessing
# --------------------------------------------------------------------------
def load_sales(path=DATA_PATH):
    if not os.path.exists(path):
        write_export(path)
    df = pd.read_csv(path, dtype={"store_id": int, "promo": int, "holiday": int})
    df["log_units"] = np.log1p(df["units"].astype(float))
    return df


def add_lag_features(df):
    df = df.sort_values(["store_id", "date"]).reset_index(drop=True)
    g = df.groupby("store_id")["log_units"]
    df["lag_1"] = g.shift(1)
    df["lag_7"] = g.shift(7)
    df["roll_mean_7"] = g.transform(lambda s: s.shift(1).rolling(7).mean())
    return df


def add_calendar_features(df):
    ts = pd.to_datetime(df["date"], format=DATE_FMT)
    df["ts"] = ts
    df["dow"] = ts.dt.day_of_week
    df["month"] = ts.dt.month - 1
    return df


def build_frame(path=DATA_PATH):
    df = load_sales(path)
    df = add_lag_features(df)
    df = add_calendar_features(df)
    df = df.dropna(subset=["lag_1", "lag_7", "roll_mean_7"]).reset_index(drop=True)
    return df


def time_split(df, val_days=VAL_DAYS):
    cutoff = df["ts"].max() - pd.Timedelta(days=val_days)
    return df[df["ts"] <= cutoff].copy(), df[df["ts"] > cutoff].copy()


class Encoders:
    def fit(self, train):
        self.vocab = {c: {v: i + 1 for i, v in enumerate(sorted(train[c].unique()))}
                      for c in CATEGORICAL}
        self.mean = train[NUMERIC].mean()
        self.std = train[NUMERIC].std().replace(0, 1.0)
        self.y_mean = float(train["log_units"].mean())
        self.y_std = float(train["log_units"].std())
        return self

    def cardinalities(self):
        return [len(self.vocab[c]) + 1 for c in CATEGORICAL]

    def transform(self, df):
        cats = np.stack([df[c].map(self.vocab[c]).fillna(0).astype(int).values
                         for c in CATEGORICAL], axis=1)
        nums = ((df[NUMERIC] - self.mean) / self.std).values.astype(np.float32)
        y = ((df["log_units"].values - self.y_mean) / self.y_std).astype(np.float32)
        return cats, nums, y


class TensorBatches:
    """Minimal in-memory loader: the whole table fits in RAM, so slice tensors directly."""

    def __init__(self, cats, nums, y, batch_size, shuffle=False, seed=0):
        self.cats = torch.as_tensor(cats, dtype=torch.long)
        self.nums = torch.as_tensor(nums)
        self.y = torch.as_tensor(y)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return math.ceil(len(self.y) / self.batch_size)

    def __iter__(self):
        n = len(self.y)
        idx = torch.randperm(n, generator=self.gen) if self.shuffle else torch.arange(n)
        for start in range(0, n, self.batch_size):
            b = idx[start:start + self.batch_size]
            yield self.cats[b], self.nums[b], self.y[b]


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
def emb_dim(card):
    return int(min(16, round(1.6 * card ** 0.56)))


class EntityEmbeddingMLP(nn.Module):
    def __init__(self, cards, n_numeric, hidden=(128, 64), dropout=0.1):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(c, emb_dim(c)) for c in cards])
        self.emb_drop = nn.Dropout(0.05)
        in_dim = sum(emb_dim(c) for c in cards) + n_numeric
        layers = []
        for h in hidden:
            layers += [nn.Linear(in_dim, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            in_dim = h
        layers.append(nn.Linear(in_dim, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, cats, nums):
        e = torch.cat([emb(cats[:, i]) for i, emb in enumerate(self.embeddings)], dim=1)
        x = torch.cat([self.emb_drop(e), nums], dim=1)
        return self.mlp(x).squeeze(-1)


def loss_fn(model, batch):
    cats, nums, y = batch
    return nn.functional.mse_loss(model(cats, nums), y)


def build_everything(path=DATA_PATH):
    df = build_frame(path)
    train_df, val_df = time_split(df)
    enc = Encoders().fit(train_df)
    train_dl = TensorBatches(*enc.transform(train_df), batch_size=BATCH_SIZE, shuffle=True, seed=SEED)
    val_dl = TensorBatches(*enc.transform(val_df), batch_size=1024)
    model = EntityEmbeddingMLP(enc.cardinalities(), len(NUMERIC))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    return model, opt, train_dl, val_dl, enc, train_df, val_df


def make_target():
    torch.manual_seed(SEED)
    model, opt, train_dl, val_dl, enc, _, _ = build_everything()
    return {
        "model": model,
        "data": train_dl,
        "val_data": val_dl,
        "loss_fn": loss_fn,
        "optimizer": opt,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, dl, enc):
    model.eval()
    se, ae, n, tot = 0.0, 0.0, 0, 0.0
    for cats, nums, y in dl:
        pred = model(cats, nums)
        tot += nn.functional.mse_loss(pred, y, reduction="sum").item()
        p = pred * enc.y_std + enc.y_mean
        t = y * enc.y_std + enc.y_mean
        se += ((p - t) ** 2).sum().item()
        ae += (torch.expm1(p) - torch.expm1(t)).abs().sum().item()
        n += len(y)
    model.train()
    return tot / n, math.sqrt(se / n), ae / n


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    t0 = time.time()
    model, opt, train_dl, val_dl, enc, train_df, val_df = build_everything()
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, epochs=EPOCHS,
                                                steps_per_epoch=len(train_dl), pct_start=0.2)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("train rows=%d (%s .. %s) val rows=%d (%s .. %s)", len(train_df),
             train_df.ts.min().date(), train_df.ts.max().date(), len(val_df),
             val_df.ts.min().date(), val_df.ts.max().date())
    log.info("model params=%d, batches/epoch=%d", n_params, len(train_dl))

    for epoch in range(1, EPOCHS + 1):
        model.train()
        run, nb = 0.0, 0
        for batch in train_dl:
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run += loss.item()
            nb += 1
        val_loss, val_rmse, val_mae = evaluate(model, val_dl, enc)
        log.info("epoch %d/%d train_loss=%.4f val_loss=%.4f val_rmse_log=%.4f val_mae_units=%.2f lr=%.2e",
                 epoch, EPOCHS, run / nb, val_loss, val_rmse, val_mae, sched.get_last_lr()[0])
    log.info("done in %.1fs", time.time() - t0)


if __name__ == "__main__":
    main()

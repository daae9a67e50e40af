"""Hourly rental demand per docking station (bike-share rebalancing model).

Joins three exports -- station metadata, hourly rental counts per dock and the
hourly weather feed -- and trains a residual MLP with entity embeddings for
station / district / hour / weekday on log1p(rentals). The last two weeks are
held out (time-based split) because the model is used to forecast ahead.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

SEED = 2024
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(RUN_DIR, "data")

N_STATIONS = 32
START = "2024-04-01"
N_DAYS = 49
VAL_DAYS = 14
HOLIDAYS = ["2024-04-19", "2024-05-01", "2024-05-09"]

NUM_COLS = ["temp_c", "feels_delta", "precip_log", "wind_kph", "humidity",
            "capacity", "dist_transit_km", "elevation_m", "is_holiday"]
CAT_COLS = {"station_id": 10, "district": 4, "hour": 6, "dow": 3}

BATCH_SIZE = 512
EPOCHS = 16
MAX_LR = 3e-3
WEIGHT_DECAY = 1e-5
WIDTH = 64
N_BLOCKS = 2
DROPOUT = 0.1


# ----------------------------------------------------------------------------
# synthetic exports (stand-in for the warehouse tables)
# ----------------------------------------------------------------------------
def write_exports(data_dir=DATA_DIR, seed=SEED):
    rng = np.random.default_rng(seed)
    os.makedirs(data_dir, exist_ok=True)

    districts = ["old_town", "harbour", "university", "business", "riverside", "suburbs"]
    dist_effect = {"old_town": 0.35, "harbour": 0.15, "university": 0.25,
                   "business": 0.30, "riverside": 0.0, "suburbs": -0.45}
    stations = pd.DataFrame({
        "station_id": [f"ST{code:04d}" for code in rng.choice(np.arange(100, 999), N_STATIONS, replace=False)],
        "district": rng.choice(districts, N_STATIONS),
        "capacity": rng.choice([15, 19, 23, 27, 31, 35], N_STATIONS),
        "dist_transit_km": np.round(rng.gamma(1.5, 0.5, N_STATIONS), 2),
        "elevation_m": np.round(rng.normal(40, 18, N_STATIONS).clip(2, None), 1),
    })
    commuter = rng.uniform(0, 1, N_STATIONS)
    popularity = rng.normal(0, 0.35, N_STATIONS)
    stations.to_csv(os.path.join(data_dir, "stations.csv"), index=False)

    hours = pd.date_range(START, periods=N_DAYS * 24, freq="h")
    doy = np.arange(len(hours)) / 24.0
    daily_cycle = -np.cos(2 * np.pi * (hours.hour.to_numpy() - 3) / 24)
    front = np.convolve(rng.normal(0, 1, len(hours)), np.ones(36) / 6, mode="same")
    temp = 9 + 0.12 * doy + 4.5 * daily_cycle + 2.0 * front + rng.normal(0, 0.6, len(hours))
    rain_state = (np.convolve(rng.normal(0, 1, len(hours)), np.ones(10) / 3, mode="same") > 1.1)
    precip = np.where(rain_state, rng.gamma(1.2, 1.4, len(hours)), 0.0)
    wind = np.clip(rng.gamma(2.5, 5.0, len(hours)) + 3 * rain_state, 0, None)
    humidity = np.clip(62 - 1.2 * (temp - 12) + 20 * rain_state + rng.normal(0, 6, len(hours)), 15, 100)
    weather = pd.DataFrame({
        "timestamp": hours.strftime("%Y-%m-%d %H:%M:%S"),
        "temp_c": temp.round(1), "feels_like_c": (temp - 0.08 * wind).round(1),
        "precip_mm": precip.round(1), "wind_kph": wind.round(1), "humidity": humidity.round(0),
    })
    gaps = rng.random(len(weather)) < 0.02
    weather.loc[gaps, ["temp_c", "feels_like_c", "wind_kph", "humidity"]] = np.nan
    weather.to_csv(os.path.join(data_dir, "weather_hourly.csv"), index=False)

    h = hours.hour.to_numpy()
    weekend = (hours.day_of_week.to_numpy() >= 5) | hours.normalize().isin(pd.to_datetime(HOLIDAYS))
    commute = np.exp(-0.5 * ((h - 8) / 1.2) ** 2) + 0.9 * np.exp(-0.5 * ((h - 17.5) / 1.5) ** 2)
    leisure = np.exp(-0.5 * ((h - 14) / 3.5) ** 2)
    night = 0.15 + 0.85 / (1 + np.exp(-(h - 6.0) * 2)) / (1 + np.exp((h - 22.5) * 2))
    weather_mult = np.exp(0.05 * (temp - 12) - 0.35 * np.log1p(precip) - 0.015 * (wind - 12))

    rows = []
    for i, st in stations.iterrows():
        c = commuter[i]
        profile = np.where(weekend, 0.3 * c * commute + (1.6 - 0.6 * c) * leisure,
                           2.2 * c * commute + (0.8 - 0.3 * c) * leisure) * night
        base = np.exp(1.35 + popularity[i] + dist_effect[st.district] - 0.25 * st.dist_transit_km
                      + 0.012 * (st.capacity - 23) - 0.006 * (st.elevation_m - 40))
        lam = base * (0.15 + profile) * weather_mult
        rentals = rng.poisson(lam)
        rows.append(pd.DataFrame({"station_id": st.station_id,
                                  "hour_start": hours.strftime("%Y-%m-%dT%H:%M"),
                                  "rentals": rentals}))
    rentals = pd.concat(rows, ignore_index=True).sample(frac=1.0, random_state=seed)
    rentals.to_csv(os.path.join(data_dir, "rentals_hourly.csv"), index=False)


# ----------------------------------------------------------------------------
# feature pipeline
# ----------------------------------------------------------------------------
def load_frame(data_dir=DATA_DIR):
    if not os.path.exists(os.path.join(data_dir, "rentals_hourly.csv")):
        write_exports(data_dir)
    stations = pd.read_csv(os.path.join(data_dir, "stations.csv"))
    weather = pd.read_csv(os.path.join(data_dir, "weather_hourly.csv"), parse_dates=["timestamp"])
    rentals = pd.read_csv(os.path.join(data_dir, "rentals_hourly.csv"), parse_dates=["hour_start"])

    weather = weather.sort_values("timestamp").set_index("timestamp")
    weather = weather.interpolate(method="time", limit=3).ffill().bfill().reset_index()

    df = rentals.merge(stations, on="station_id", how="left", validate="many_to_one")
    df = df.merge(weather, left_on="hour_start", right_on="timestamp", how="left", validate="many_to_one")
    assert df["temp_c"].notna().all() and df["district"].notna().all()

    df["hour"] = df["hour_start"].dt.hour
    df["dow"] = df["hour_start"].dt.day_of_week
    df["is_holiday"] = df["hour_start"].dt.normalize().isin(pd.to_datetime(HOLIDAYS)).astype(float)
    df["feels_delta"] = df["feels_like_c"] - df["temp_c"]
    df["precip_log"] = np.log1p(df["precip_mm"])
    return df.sort_values(["hour_start", "station_id"]).reset_index(drop=True)


def time_split(df, val_days=VAL_DAYS):
    cutoff = df["hour_start"].max().normalize() - pd.Timedelta(days=val_days - 1)
    return df[df["hour_start"] < cutoff].copy(), df[df["hour_start"] >= cutoff].copy(), cutoff


class FeatureEncoder:
    def fit(self, train_df):
        self.vocab = {c: {v: i + 1 for i, v in enumerate(sorted(train_df[c].unique()))} for c in CAT_COLS}
        self.mean = train_df[NUM_COLS].mean()
        self.std = train_df[NUM_COLS].std().replace(0, 1.0)
        return self

    def transform(self, df):
        cats = np.stack([df[c].map(self.vocab[c]).fillna(0).astype(np.int64).to_numpy() for c in CAT_COLS], axis=1)
        nums = ((df[NUM_COLS] - self.mean) / self.std).to_numpy(np.float32)
        y = np.log1p(df["rentals"].to_numpy(np.float32))
        return cats, nums, y

    @property
    def cardinalities(self):
        return [len(self.vocab[c]) + 1 for c in CAT_COLS]


class DemandDataset(Dataset):
    def __init__(self, cats, nums, y):
        self.cats, self.nums, self.y = torch.from_numpy(cats), torch.from_numpy(nums), torch.from_numpy(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        # idx is a list of row indices (batched sampling, see make_loader)
        return self.cats[idx], self.nums[idx], self.y[idx]


def make_loader(ds, batch_size, shuffle, generator=None):
    base = RandomSampler(ds, generator=generator) if shuffle else SequentialSampler(ds)
    return DataLoader(ds, sampler=BatchSampler(base, batch_size, drop_last=False), batch_size=None)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ResBlock(nn.Module):
    def __init__(self, width, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, width * 2), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(width * 2, width))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class DemandNet(nn.Module):
    def __init__(self, cardinalities, emb_dims, n_num, width=WIDTH, n_blocks=N_BLOCKS, dropout=DROPOUT):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(n, d) for n, d in zip(cardinalities, emb_dims)])
        self.inp = nn.Linear(sum(emb_dims) + n_num, width)
        self.blocks = nn.Sequential(*[ResBlock(width, dropout) for _ in range(n_blocks)])
        self.head = nn.Sequential(nn.LayerNorm(width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, cats, nums):
        e = [emb(cats[:, j]) for j, emb in enumerate(self.embs)]
        h = self.inp(torch.cat(e + [nums], dim=1))
        return self.head(self.blocks(h)).squeeze(-1)


criterion = nn.MSELoss()


def loss_fn(model, batch):
    cats, nums, y = batch
    return criterion(model(cats, nums), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=MAX_LR, weight_decay=WEIGHT_DECAY)


def build():
    torch.manual_seed(SEED)
    df = load_frame()
    train_df, val_df, cutoff = time_split(df)
    enc = FeatureEncoder().fit(train_df)
    train_ds = DemandDataset(*enc.transform(train_df))
    val_ds = DemandDataset(*enc.transform(val_df))
    g = torch.Generator().manual_seed(SEED)
    train_loader = make_loader(train_ds, BATCH_SIZE, shuffle=True, generator=g)
    val_loader = make_loader(val_ds, 4096, shuffle=False)
    model = DemandNet(enc.cardinalities, list(CAT_COLS.values()), len(NUM_COLS))
    return model, train_loader, val_loader, cutoff


def make_target():
    model, train_loader, val_loader, _ = build()
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    preds, ys = [], []
    for cats, nums, y in loader:
        preds.append(model(cats, nums))
        ys.append(y)
    model.train()
    p, y = torch.cat(preds), torch.cat(ys)
    mse = torch.mean((p - y) ** 2).item()
    counts_p, counts_y = torch.expm1(p).clamp(min=0), torch.expm1(y)
    mae = torch.mean(torch.abs(counts_p - counts_y)).item()
    return mse, mse ** 0.5, mae


def main():
    torch.set_num_threads(1)
    t_start = time.time()
    model, train_loader, val_loader, cutoff = build()
    optimizer = make_optimizer(model.parameters())
    steps = len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=MAX_LR, total_steps=EPOCHS * steps,
                                                    pct_start=0.25)
    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples "
          f"(val from {cutoff.date()})")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model: DemandNet, trainable params: {n_params:,}")

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        total, count = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            scheduler.step()
            total += loss.item() * len(batch[2])
            count += len(batch[2])
        val_mse, val_rmsle, val_mae = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - {1000 * dt / steps:.0f}ms/step - loss: {total / count:.4f} "
              f"- val_loss: {val_mse:.4f} - val_rmsle: {val_rmsle:.4f} - val_mae: {val_mae:.3f} "
              f"- lr: {scheduler.get_last_lr()[0]:.2e}")

    torch.save(model.state_dict(), os.path.join(RUN_DIR, "demand_net.pt"))
    print(f"done in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()

"""Day-ahead chilled-water plant load forecast with an LSTM encoder-decoder.

72 h of history (load, outdoor temperature, calendar) -> next 24 h of load.
The decoder is trained with teacher forcing and rolled out autoregressively
for validation. Hourly plant data is simulated (fixed seed) into plant_hourly.csv.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "plant_hourly.csv")

SEED = 11
WINDOW = 72
HORIZON = 24
STRIDE = 3
BATCH_SIZE = 64
EPOCHS = 26
LR = 3e-3
HIDDEN = 48

torch.set_num_threads(1)


# ---------------------------------------------------------------- data
def simulate_plant(n_days=420, seed=SEED):
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2022-03-01", periods=n_days * 24, freq="h")
    hour = np.asarray(idx.hour)
    doy = np.asarray(idx.day_of_year)
    weekend = np.asarray(idx.day_of_week) >= 5

    # outdoor temperature: season + diurnal + slow weather fronts
    weather = np.zeros(len(idx))
    for t in range(1, len(idx)):
        weather[t] = 0.985 * weather[t - 1] + rng.normal(0, 0.45)
    temp = 17 - 9 * np.cos(2 * np.pi * (doy - 20) / 365) + 5 * np.sin(2 * np.pi * (hour - 9) / 24) + weather

    occupied = np.where(weekend, 0.35, 1.0) * np.clip(np.sin(np.pi * (hour - 6) / 14), 0, None)
    cooling = np.clip(temp - 16, 0, None)
    noise = np.zeros(len(idx))
    for t in range(1, len(idx)):
        noise[t] = 0.8 * noise[t - 1] + rng.normal(0, 18)
    load_kw = 260 + 420 * occupied + 38 * cooling * (0.4 + occupied) + noise
    return pd.DataFrame({"timestamp": idx, "load_kw": load_kw.round(1), "oat_c": temp.round(2)})


def load_frame():
    if not os.path.exists(CSV_PATH):
        tmp = CSV_PATH + f".{os.getpid()}.tmp"
        simulate_plant().to_csv(tmp, index=False)
        os.replace(tmp, CSV_PATH)
    df = pd.read_csv(CSV_PATH, parse_dates=["timestamp"])
    ts = df["timestamp"].dt
    df["hour_sin"] = np.sin(2 * np.pi * ts.hour / 24)
    df["hour_cos"] = np.cos(2 * np.pi * ts.hour / 24)
    df["weekend"] = (ts.day_of_week >= 5).astype(np.float32)
    return df


class PlantWindows(Dataset):
    """Encoder gets [load, oat, hour_sin, hour_cos, weekend] for the past WINDOW hours,
    decoder gets the calendar + (forecast) temperature for the next HORIZON hours."""

    def __init__(self, load, cov, origins):
        self.load, self.cov, self.origins = load, cov, origins

    def __len__(self):
        return len(self.origins)

    def __getitem__(self, i):
        t = self.origins[i]
        enc = np.concatenate([self.load[t - WINDOW:t, None], self.cov[t - WINDOW:t]], axis=1)
        dec_cov = self.cov[t:t + HORIZON]
        y = self.load[t:t + HORIZON]
        return (torch.from_numpy(enc).float(), torch.from_numpy(dec_cov).float(), torch.from_numpy(y).float())


def make_datasets():
    df = load_frame()
    n = len(df)
    split = int(0.8 * n)
    train_df = df.iloc[:split]
    stats = {c: (train_df[c].mean(), train_df[c].std()) for c in ["load_kw", "oat_c"]}
    load = ((df["load_kw"] - stats["load_kw"][0]) / stats["load_kw"][1]).to_numpy(np.float32)
    oat = ((df["oat_c"] - stats["oat_c"][0]) / stats["oat_c"][1]).to_numpy(np.float32)
    cov = np.stack([oat, df["hour_sin"], df["hour_cos"], df["weekend"]], axis=1).astype(np.float32)
    train_origins = np.arange(WINDOW, split - HORIZON + 1, STRIDE)
    val_origins = np.arange(split + WINDOW, n - HORIZON + 1, 24)
    return PlantWindows(load, cov, train_origins), PlantWindows(load, cov, val_origins), stats


# ---------------------------------------------------------------- model
class LoadSeq2Seq(nn.Module):
    def __init__(self, n_enc=5, n_cov=4, hidden=HIDDEN):
        super().__init__()
        self.encoder = nn.LSTM(n_enc, hidden, batch_first=True)
        self.decoder = nn.LSTM(1 + n_cov, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, enc, dec_cov, y=None):
        _, state = self.encoder(enc)
        last_obs = enc[:, -1, 0]
        if y is not None:
            # teacher forcing: decoder input at step k is the load observed at step k-1
            prev = torch.roll(y, shifts=-1, dims=1)
            prev[:, 0] = last_obs
            dec_in = torch.cat([prev.unsqueeze(-1), dec_cov], dim=-1)
            out, _ = self.decoder(dec_in, state)
            return self.head(out).squeeze(-1)
        preds = []
        prev = last_obs.unsqueeze(-1)
        for k in range(dec_cov.size(1)):
            step_in = torch.cat([prev, dec_cov[:, k]], dim=-1).unsqueeze(1)
            out, state = self.decoder(step_in, state)
            prev = self.head(out[:, 0])
            preds.append(prev)
        return torch.cat(preds, dim=1)


def loss_fn(model, batch):
    enc, dec_cov, y = batch
    return nn.functional.mse_loss(model(enc, dec_cov, y), y)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, _ = make_datasets()
    model = LoadSeq2Seq()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True)
    val_loader = DataLoader(val_ds, batch_size=128)
    return {"model": model, "data": train_loader, "val_data": val_loader, "loss_fn": loss_fn,
            "optimizer": optimizer, "task": "regression"}


@torch.no_grad()
def validate(model, loader, load_std):
    model.eval()
    se, ae, n = 0.0, 0.0, 0
    for enc, dec_cov, y in loader:
        pred = model(enc, dec_cov)
        se += ((pred - y) ** 2).sum().item()
        ae += (pred - y).abs().sum().item()
        n += y.numel()
    model.train()
    return se / n, ae / n * load_std


def main():
    t = make_target()
    model, optimizer = t["model"], t["optimizer"]
    train_loader, val_loader = t["data"], t["val_data"]
    _, _, stats = make_datasets()
    load_std = stats["load_kw"][1]
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS, eta_min=1e-4)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"LoadSeq2Seq: {n_params} params | train windows {len(train_loader.dataset)} | "
          f"val days {len(val_loader.dataset)} | window={WINDOW}h horizon={HORIZON}h")
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        tot, nb = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            tot += loss.item()
            nb += 1
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        val_mse, val_mae_kw = validate(model, val_loader, load_std)
        print(f"epoch {epoch:02d} | train_mse {tot / nb:.4f} | val_mse {val_mse:.4f} | "
              f"val_mae {val_mae_kw:6.1f} kW | lr {lr:.2e} | {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

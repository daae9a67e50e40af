"""Denoising autoencoder for gap-filling daily HVAC telemetry profiles.

The BMS export (`bms_hourly.csv`) has hourly zone temperature and HVAC electric
power per building. Complete building-days are pivoted into 48-dim profiles
(24 h x 2 channels) and standardised. A masking DAE is trained to rebuild the
full profile from a copy with random hours dropped; at deployment it fills the
hours lost to BMS outages. Validation uses held-out buildings with a fixed mask.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

CONFIG = dict(
    seed=13,
    n_buildings=70,
    n_days=90,
    n_val_buildings=14,
    mask_prob=0.25,
    batch_size=128,
    epochs=20,
    lr=2e-3,
    lr_decay=0.93,
    hidden=128,
    bottleneck=12,
)


def write_bms_export(out_dir, cfg):
    rng = np.random.default_rng(cfg["seed"])
    hours = np.arange(24)
    cols = {k: [] for k in ["building_id", "date", "hour", "zone_temp_c", "power_kw"]}
    for b in range(cfg["n_buildings"]):
        setpoint = rng.normal(21.5, 0.8)
        setback = rng.uniform(1.5, 4.0)
        open_h, close_h = int(rng.integers(6, 9)), int(rng.integers(17, 21))
        base_kw = rng.lognormal(3.0, 0.4)
        hvac_kw = base_kw * rng.uniform(0.03, 0.08)
        leak = rng.uniform(0.05, 0.2)                     # envelope quality
        days = pd.date_range(pd.Timestamp("2024-01-08") + pd.Timedelta(days=int(rng.integers(0, 200))),
                             periods=cfg["n_days"], freq="D")
        for day in days:
            weekday = day.day_of_week < 5
            season = 10 - 9 * np.cos(2 * np.pi * (day.day_of_year - 20) / 365)
            outdoor = season + rng.normal(0, 3) + 4 * np.sin(2 * np.pi * (hours - 9) / 24)
            occupied = weekday & (hours >= open_h) & (hours < close_h)
            target = np.where(occupied, setpoint, setpoint - setback * np.sign(setpoint - outdoor.mean()))
            zone = np.empty(24)
            z = target[0] + leak * (outdoor[0] - target[0])
            for h in hours:                               # thermal inertia
                z += 0.5 * (target[h] + leak * (outdoor[h] - target[h]) - z)
                zone[h] = z
            zone += rng.normal(0, 0.25, 24)
            power = (base_kw * (0.35 + 0.65 * occupied) + hvac_kw * np.abs(target - outdoor) * (0.6 + 0.4 * occupied)
                     + rng.normal(0, 0.04 * base_kw, 24))
            gaps = rng.random(24) < 0.015                 # BMS outages
            cols["building_id"] += [f"BLD-{b:03d}"] * 24
            cols["date"] += [day.date().isoformat()] * 24
            cols["hour"].append(hours)
            cols["zone_temp_c"].append(np.where(gaps, np.nan, zone.round(2)))
            cols["power_kw"].append(np.where(gaps, np.nan, power.round(2)))
    for k in ["hour", "zone_temp_c", "power_kw"]:
        cols[k] = np.concatenate(cols[k])
    path = os.path.join(out_dir, "bms_hourly.csv")
    pd.DataFrame(cols).to_csv(path, index=False)
    return path


def load_profiles(path, cfg):
    df = pd.read_csv(path)
    wide = df.pivot_table(index=["building_id", "date"], columns="hour", values=["zone_temp_c", "power_kw"],
                          dropna=False)
    wide = wide.dropna()                                  # complete days only for training the DAE
    # power scale differs by 10x between buildings: model the profile shape relative to the building median
    wide["power_kw"] = np.log(wide["power_kw"].clip(lower=0.1)).sub(
        np.log(wide["power_kw"].clip(lower=0.1)).groupby(level="building_id").transform("median").median(axis=1),
        axis=0)
    buildings = wide.index.get_level_values("building_id")
    rng = np.random.default_rng(cfg["seed"])
    val_b = set(rng.choice(sorted(set(buildings)), size=cfg["n_val_buildings"], replace=False))
    is_val = buildings.isin(val_b)
    X = wide.to_numpy(dtype=np.float32)
    mu, sd = X[~is_val].mean(0), X[~is_val].std(0) + 1e-6
    X = (X - mu) / sd
    return np.ascontiguousarray(X[~is_val]), np.ascontiguousarray(X[is_val])


class MaskedProfiles(torch.utils.data.Dataset):
    def __init__(self, X, mask_prob):
        self.X, self.mask_prob = X, mask_prob

    def __len__(self):
        return len(self.X)

    def corrupt(self, x):
        drop = torch.rand(x.shape) < self.mask_prob
        return x.masked_fill(drop, 0.0)                   # dropped hours -> column mean (0 after scaling)

    def __getitem__(self, i):
        x = torch.from_numpy(self.X[i])
        return self.corrupt(x), x


class ProfileDAE(nn.Module):
    def __init__(self, d, hidden, bottleneck):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, bottleneck))
        self.decoder = nn.Sequential(nn.SiLU(), nn.Linear(bottleneck, hidden), nn.SiLU(), nn.Linear(hidden, d))

    def forward(self, x):
        return self.decoder(self.encoder(x))


mse = nn.MSELoss()


def loss_fn(model, batch):
    noisy, clean = batch
    return mse(model(noisy), clean)


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        X_tr, _ = load_profiles(write_bms_export(tmp, cfg), cfg)
    ds = MaskedProfiles(X_tr, cfg["mask_prob"])
    dl = torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], shuffle=True,
                                     generator=torch.Generator().manual_seed(cfg["seed"]))
    it = iter(dl)
    data = [next(it) for _ in range(4)]
    model = ProfileDAE(X_tr.shape[1], cfg["hidden"], cfg["bottleneck"])
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.Adam(model.parameters(), lr=cfg["lr"]), "task": "regression"}


@torch.no_grad()
def evaluate(model, noisy, clean, mask):
    model.eval()
    out = model(noisy)
    model.train()
    return mse(out, clean).item(), ((out - clean)[mask] ** 2).mean().sqrt().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        X_tr, X_va = load_profiles(write_bms_export(tmp, cfg), cfg)
    # fixed validation mask so the numbers are comparable across epochs / runs
    g = torch.Generator().manual_seed(cfg["seed"] + 1)
    va_clean = torch.from_numpy(X_va).clone()
    va_mask = torch.rand(va_clean.shape, generator=g) < cfg["mask_prob"]
    va_noisy = va_clean.masked_fill(va_mask, 0.0)
    print(f"profiles: train {len(X_tr)} / val {len(X_va)} building-days, dim {X_tr.shape[1]}")

    dl = torch.utils.data.DataLoader(MaskedProfiles(X_tr, cfg["mask_prob"]), batch_size=cfg["batch_size"],
                                     shuffle=True, generator=torch.Generator().manual_seed(cfg["seed"]))
    model = ProfileDAE(X_tr.shape[1], cfg["hidden"], cfg["bottleneck"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=cfg["lr_decay"])

    for epoch in range(1, cfg["epochs"] + 1):
        tot, n = 0.0, 0
        for noisy, clean in dl:
            loss = mse(model(noisy), clean)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(clean)
            n += len(clean)
        sched.step()
        val_mse, val_rmse = evaluate(model, va_noisy, va_clean, va_mask)
        print(f"[ep {epoch:02d}/{cfg['epochs']}] train_mse={tot / n:.4f} val_mse={val_mse:.4f} "
              f"val_impute_rmse={val_rmse:.4f} lr={sched.get_last_lr()[0]:.2e}")
    print(f"finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()

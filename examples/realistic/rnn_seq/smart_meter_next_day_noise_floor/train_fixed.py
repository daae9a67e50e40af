"""Next-day household electricity consumption forecast (smart-meter pilot).

`readings.csv` holds daily kWh per household (with meter gaps) and the local
daily mean temperature; `targets.csv` holds, per household, the forecast date,
the weather-service temperature forecast for that date and the realised kWh.
An LSTM reads the (variable-length) reading history, its final state is joined
with the forecast-day covariates and a small head predicts log kWh.
Training loop logs in the HF Trainer dict format.
"""
import argparse
import math
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

CONFIG = dict(
    seed=5,
    n_households=3000,
    val_frac=0.2,
    batch_size=64,
    epochs=8,
    lr=1e-3,
    weight_decay=0.01,
    warmup_ratio=0.1,
    hidden=32,
    logging_steps=25,
)


def write_exports(out_dir, cfg):
    rng = np.random.default_rng(cfg["seed"])
    n = cfg["n_households"]
    level = rng.normal(np.log(9.0), 0.35, n)          # log kWh/day baseline
    heat = rng.uniform(0.0, 0.045, n)                 # electric heating share
    weekend = rng.normal(0.08, 0.05, n)
    cols = {k: [] for k in ["household_id", "date", "kwh", "temp_c"]}
    targets = []
    for h in range(n):
        hist = int(rng.integers(14, 61))
        days = np.datetime64("2023-10-01") + int(rng.integers(0, 120)) + np.arange(hist + 1)
        doy = (days - days.astype("datetime64[Y]")).astype(int) + 1
        temp = 10 - 8 * np.cos(2 * np.pi * (doy - 20) / 365) + np.cumsum(rng.normal(0, 1.2, hist + 1)) * 0.5
        temp += rng.normal(0, 1.5, hist + 1)
        is_we = (days.astype(int) + 3) % 7 >= 5          # Mon=0 ... Sun=6
        log_kwh = (level[h] + heat[h] * np.clip(15 - temp, 0, None) + weekend[h] * is_we
                   + rng.normal(0, 0.42, hist + 1))   # occupancy, appliances, guests, ...
        kwh = np.exp(log_kwh).round(2)
        obs = kwh[:-1].copy()
        obs[rng.random(hist) < 0.04] = np.nan         # meter communication gaps
        hid = f"H{h:05d}"
        cols["household_id"] += [hid] * hist
        cols["date"].append(days[:-1].astype(str))
        cols["kwh"].append(obs)
        cols["temp_c"].append(temp[:-1].round(1))
        targets.append((hid, str(days[-1]), round(temp[-1] + rng.normal(0, 1.5), 1),
                        int(is_we[-1]), kwh[-1]))
    r_path, t_path = os.path.join(out_dir, "readings.csv"), os.path.join(out_dir, "targets.csv")
    for k in ["date", "kwh", "temp_c"]:
        cols[k] = np.concatenate(cols[k])
    pd.DataFrame(cols).to_csv(r_path, index=False)
    pd.DataFrame(targets, columns=["household_id", "date", "temp_forecast_c", "is_weekend", "kwh"]).to_csv(
        t_path, index=False)
    return r_path, t_path


def build_datasets(cfg, tmp_dir):
    r_path, t_path = write_exports(tmp_dir, cfg)
    readings = pd.read_csv(r_path, parse_dates=["date"]).sort_values(["household_id", "date"])
    targets = pd.read_csv(t_path, parse_dates=["date"]).set_index("household_id")

    readings["missing"] = readings["kwh"].isna().astype(float)
    readings["log_kwh"] = np.log(readings["kwh"])
    readings["log_kwh"] = readings["log_kwh"].fillna(readings.groupby("household_id")["log_kwh"].transform("median"))
    readings["weekend"] = (readings["date"].dt.day_of_week >= 5).astype(float)
    readings["temp"] = (readings["temp_c"] - 8.0) / 6.0

    ids = targets.index.to_numpy()
    rng = np.random.default_rng(cfg["seed"])
    perm = rng.permutation(len(ids))
    n_val = int(len(ids) * cfg["val_frac"])
    val_ids, train_ids = set(ids[perm[:n_val]]), set(ids[perm[n_val:]])

    y_all = np.log(targets["kwh"])
    y_mu, y_sd = y_all[list(train_ids)].mean(), y_all[list(train_ids)].std()
    readings["log_kwh"] = (readings["log_kwh"] - y_mu) / y_sd
    arr = readings[["log_kwh", "missing", "temp", "weekend"]].to_numpy(dtype=np.float32)
    starts = np.flatnonzero(np.r_[True, readings["household_id"].to_numpy()[1:] != readings["household_id"].to_numpy()[:-1]])
    hist = dict(zip(readings["household_id"].to_numpy()[starts], np.split(arr, starts[1:])))
    ctx_all = np.stack([(targets["temp_forecast_c"].to_numpy() - 8.0) / 6.0, targets["is_weekend"].to_numpy()], 1)
    y_std = ((y_all - y_mu) / y_sd).to_numpy()

    def make(id_set):
        out = []
        for j, hid in enumerate(ids):
            if hid not in id_set:
                continue
            out.append((torch.from_numpy(hist[hid]), torch.tensor(ctx_all[j], dtype=torch.float32),
                        torch.tensor(y_std[j], dtype=torch.float32)))
        return out

    return make(train_ids), make(val_ids)


def collate(batch):
    seqs, ctx, y = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    return pad_sequence(seqs, batch_first=True), lengths, torch.stack(ctx), torch.stack(y)


class LoadForecaster(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.lstm = nn.LSTM(4, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden + 2, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x, lengths, ctx):
        _, (h, _) = self.lstm(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
        return self.head(torch.cat([h[-1], ctx], -1)).squeeze(-1)


mse = nn.MSELoss()


def loss_fn(model, batch):
    x, lengths, ctx, y = batch
    return mse(model(x, lengths, ctx), y)


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train, _ = build_datasets(cfg, tmp)
    bs = cfg["batch_size"]
    data = [collate(train[i * bs:(i + 1) * bs]) for i in range(4)]
    model = LoadForecaster(cfg["hidden"])
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"]),
            "task": "regression"}


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    se, ae, n = 0.0, 0.0, 0
    for x, lengths, ctx, y in dl:
        pred = model(x, lengths, ctx)
        se += ((pred - y) ** 2).sum().item()
        ae += (pred - y).abs().sum().item()
        n += len(y)
    model.train()
    return se / n, ae / n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train, val = build_datasets(cfg, tmp)
    train_dl = torch.utils.data.DataLoader(train, batch_size=cfg["batch_size"], shuffle=True, collate_fn=collate,
                                           generator=torch.Generator().manual_seed(cfg["seed"]))
    val_dl = torch.utils.data.DataLoader(val, batch_size=256, shuffle=False, collate_fn=collate)

    model = LoadForecaster(cfg["hidden"])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    total = cfg["epochs"] * len(train_dl)
    warmup = int(cfg["warmup_ratio"] * total)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
    print(f"***** Running training *****\n  Num examples = {len(train)}\n  Num Epochs = {cfg['epochs']}\n"
          f"  Total optimization steps = {total}")

    t_start, step, run_loss, run_n, all_loss = time.time(), 0, 0.0, 0, 0.0
    for epoch in range(cfg["epochs"]):
        for x, lengths, ctx, y in train_dl:
            loss = mse(model(x, lengths, ctx), y)
            opt.zero_grad()
            loss.backward()
            gn = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            run_loss += loss.item()
            run_n += 1
            all_loss += loss.item()
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(run_loss / run_n, 4), "grad_norm": round(gn.item(), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.3e}"), "epoch": round(step / len(train_dl), 2)})
                run_loss, run_n = 0.0, 0
        t0 = time.time()
        val_mse, val_mae = evaluate(model, val_dl)
        rt = time.time() - t0
        print({"eval_loss": round(val_mse, 4), "eval_mae": round(val_mae, 4), "eval_runtime": round(rt, 4),
               "eval_samples_per_second": round(len(val) / rt, 1), "epoch": float(epoch + 1)})
    rt = time.time() - t_start
    print({"train_runtime": round(rt, 4), "train_samples_per_second": round(len(train) * cfg["epochs"] / rt, 1),
           "train_loss": round(all_loss / step, 4), "epoch": float(cfg["epochs"])})


if __name__ == "__main__":
    main()

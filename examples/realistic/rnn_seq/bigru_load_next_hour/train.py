"""Next-hour load forecasting for a fleet of feeder substations.

Each substation has ~16 weeks of hourly load (daily + weekly profile, a temperature
response and AR(1) noise). The model reads a one-week window and is trained
sequence-to-sequence: at every hour t it predicts the load at t+1. Validation uses
the last three weeks of every substation; the backtest at the end is the number
the operations team actually cares about: the forecast for the hour right after
the window.
"""
import logging
import sys
import time

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO, stream=sys.stdout)
log = logging.getLogger("load_forecast")

CFG = dict(
    n_stations=24,
    n_weeks=16,
    val_weeks=3,
    window=168,
    hidden=48,
    batch_size=32,
    lr=3e-3,
    weight_decay=1e-4,
    epochs=8,
    steps_per_epoch=30,
    seed=7,
)


def simulate_stations(n_stations, n_weeks, seed):
    rng = np.random.default_rng(seed)
    hours = np.arange(n_weeks * 168)
    hod = hours % 24
    dow = (hours // 24) % 7
    series = []
    for _ in range(n_stations):
        base = rng.uniform(20, 60)
        morning = rng.uniform(0.1, 0.3) * np.exp(-0.5 * ((hod - rng.uniform(7, 9)) / 1.5) ** 2)
        evening = rng.uniform(0.2, 0.45) * np.exp(-0.5 * ((hod - rng.uniform(18, 20)) / 2.0) ** 2)
        weekend = np.where(dow >= 5, rng.uniform(-0.2, -0.05), 0.0)
        temp = 12 + 8 * np.sin(2 * np.pi * (hours - 15) / 24) + np.cumsum(rng.normal(0, 0.3, hours.size)) * 0.2
        heating = rng.uniform(0.005, 0.015) * np.clip(15 - temp, 0, None)
        ar = np.zeros(hours.size)
        eps = rng.normal(0, rng.uniform(0.02, 0.05), hours.size)
        for t in range(1, hours.size):
            ar[t] = 0.9 * ar[t - 1] + eps[t]
        load = base * (1 + morning + evening + weekend + heating + ar)
        series.append(load)
    series = np.stack(series).astype(np.float32)
    calendar = np.stack([
        np.sin(2 * np.pi * hod / 24), np.cos(2 * np.pi * hod / 24),
        np.sin(2 * np.pi * dow / 7), np.cos(2 * np.pi * dow / 7),
    ], axis=-1).astype(np.float32)
    return series, calendar


def build_data(cfg):
    series, calendar = simulate_stations(cfg["n_stations"], cfg["n_weeks"], cfg["seed"])
    split = (cfg["n_weeks"] - cfg["val_weeks"]) * 168
    mean = series[:, :split].mean(axis=1, keepdims=True)
    std = series[:, :split].std(axis=1, keepdims=True)
    z = (series - mean) / std
    feats = np.concatenate([z[..., None], np.broadcast_to(calendar, z.shape + (4,))], axis=-1)
    feats = torch.from_numpy(np.ascontiguousarray(feats))
    return feats, split


def windows(feats, starts, stations, window):
    x = torch.stack([feats[s, t:t + window] for s, t in zip(stations, starts)])
    y = torch.stack([feats[s, t + 1:t + window + 1, 0] for s, t in zip(stations, starts)])
    return x, y


def sample_batch(feats, lo, hi, window, batch_size, gen):
    stations = torch.randint(0, feats.shape[0], (batch_size,), generator=gen).tolist()
    starts = torch.randint(lo, hi - window - 1, (batch_size,), generator=gen).tolist()
    return windows(feats, starts, stations, window)


class LoadGRU(nn.Module):
    def __init__(self, n_features=5, hidden=48):
        super().__init__()
        self.rnn = nn.GRU(n_features, hidden, num_layers=1, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def make_optimizer(params, cfg=CFG):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def make_target():
    torch.manual_seed(CFG["seed"])
    feats, split = build_data(CFG)
    gen = torch.Generator().manual_seed(CFG["seed"])
    data = [sample_batch(feats, 0, split, CFG["window"], CFG["batch_size"], gen) for _ in range(3)]
    model = LoadGRU(hidden=CFG["hidden"])
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "task": "regression"}


@torch.no_grad()
def evaluate(model, feats, split, window):
    model.eval()
    n_st, total = feats.shape[0], feats.shape[1]
    starts = list(range(split - window, total - window - 1, 24))
    losses, last_err = [], []
    for s in range(n_st):
        x, y = windows(feats, starts, [s] * len(starts), window)
        pred = model(x)
        losses.append(nn.functional.mse_loss(pred, y).item())
        last_err.append((pred[:, -1] - y[:, -1]))
    model.train()
    last_err = torch.cat(last_err)
    return float(np.mean(losses)), last_err.pow(2).mean().item(), last_err.abs().mean().item()


@torch.no_grad()
def backtest(model, feats, split, window):
    """Rolling next-hour forecast over the validation weeks, issued every 6 hours."""
    model.eval()
    errs, naive = [], []
    for s in range(feats.shape[0]):
        starts = list(range(split - window, feats.shape[1] - window - 1, 6))
        x, y = windows(feats, starts, [s] * len(starts), window)
        pred = model(x)[:, -1]
        errs.append(pred - y[:, -1])
        naive.append(x[:, -1, 0] - y[:, -1])
    errs, naive = torch.cat(errs), torch.cat(naive)
    return errs.pow(2).mean().item(), errs.abs().mean().item(), naive.pow(2).mean().item()


def main():
    cfg = CFG
    torch.manual_seed(cfg["seed"])
    feats, split = build_data(cfg)
    log.info("stations=%d hours=%d train_hours=%d window=%d", feats.shape[0], feats.shape[1], split, cfg["window"])
    model = LoadGRU(hidden=cfg["hidden"])
    log.info("model params=%d", sum(p.numel() for p in model.parameters()))
    opt = make_optimizer(model.parameters(), cfg)
    total_steps = cfg["epochs"] * cfg["steps_per_epoch"]
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg["lr"], total_steps=total_steps, pct_start=0.15)
    gen = torch.Generator().manual_seed(cfg["seed"])
    t0 = time.time()
    for epoch in range(1, cfg["epochs"] + 1):
        running = 0.0
        for step in range(cfg["steps_per_epoch"]):
            batch = sample_batch(feats, 0, split, cfg["window"], cfg["batch_size"], gen)
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            running += loss.item()
        val_loss, val_last_mse, val_last_mae = evaluate(model, feats, split, cfg["window"])
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_mae_last=%.4f lr=%.2e elapsed=%.1fs",
                 epoch, running / cfg["steps_per_epoch"], val_loss, val_last_mae,
                 sched.get_last_lr()[0], time.time() - t0)
    mse, mae, naive_mse = backtest(model, feats, split, cfg["window"])
    log.info("backtest next-hour: mse=%.4f mae=%.4f (persistence mse=%.4f)", mse, mae, naive_mse)


if __name__ == "__main__":
    main()

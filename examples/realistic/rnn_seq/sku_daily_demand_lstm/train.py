"""Next-day unit demand per SKU from variable-length sales histories.

Daily unit sales for a few hundred SKUs (some launched recently, so their
history is short). Each sample is the last <= 42 days of an SKU's history
(log units, day-of-week, promo flag); a packed LSTM predicts a Poisson rate
for the next day's units.
"""
import math
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 2024
N_SKUS = 260
N_DAYS = 240
HIST = 42
MIN_HIST = 14
VAL_DAYS = 28
ORIGINS_PER_SKU = 6
BATCH_SIZE = 64
EPOCHS = 6
LR = 5e-3
WARMUP_STEPS = 20
HIDDEN = 48
LOG_EVERY = 10

torch.manual_seed(SEED)
np.random.seed(SEED)
torch.set_num_threads(1)


def simulate_sales(seed):
    rng = np.random.default_rng(seed)
    dates = pd.date_range("2023-03-01", periods=N_DAYS, freq="D")
    dow = dates.day_of_week.to_numpy()
    frames = []
    for sku in range(N_SKUS):
        launch = 0 if rng.random() < 0.6 else int(rng.integers(0, N_DAYS - 60))
        base = rng.lognormal(np.log(6.0), 0.6)
        weekly = np.exp(rng.normal(0, 0.25, size=7))
        weekly /= weekly.mean()
        trend = rng.normal(0, 0.003)
        promo = (rng.random(N_DAYS) < 0.08).astype(np.float32)
        lift = rng.uniform(1.5, 2.5)
        level = base * np.exp(np.cumsum(rng.normal(trend, 0.02, size=N_DAYS)))
        rate = level * weekly[dow] * np.where(promo > 0, lift, 1.0)
        units = rng.poisson(rate).astype(np.float32)
        live = np.arange(N_DAYS) >= launch
        frames.append(pd.DataFrame({"sku": f"SKU-{sku:04d}", "date": dates[live],
                                    "units": units[live], "promo": promo[live]}))
    return pd.concat(frames, ignore_index=True)


def make_windows(sales, seed):
    rng = np.random.default_rng(seed)
    cutoff = sales["date"].max() - pd.Timedelta(days=VAL_DAYS)
    train, val = [], []
    for _, g in sales.groupby("sku", sort=True):
        units = g["units"].to_numpy(np.float32)
        dow = g["date"].dt.day_of_week.to_numpy()
        feats = np.stack([np.log1p(units), np.sin(2 * np.pi * dow / 7), np.cos(2 * np.pi * dow / 7),
                          g["promo"].to_numpy(np.float32)], axis=1).astype(np.float32)
        is_val_day = (g["date"] > cutoff).to_numpy()
        # forecast day index t uses days [t - HIST, t) as history
        candidates = np.arange(MIN_HIST, len(units))
        tr_t = candidates[~is_val_day[candidates]]
        va_t = candidates[is_val_day[candidates]]
        for t in rng.choice(tr_t, size=min(ORIGINS_PER_SKU, len(tr_t)), replace=False):
            s = max(0, t - HIST)
            train.append((feats[s:t], feats[t, 3], units[t]))
        for t in rng.choice(va_t, size=min(2, len(va_t)), replace=False):
            s = max(0, t - HIST)
            val.append((feats[s:t], feats[t, 3], units[t]))
    return train, val


class WindowDataset(Dataset):
    def __init__(self, windows):
        self.windows = windows

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, idx):
        x, promo_next, y = self.windows[idx]
        return torch.from_numpy(x), torch.tensor([promo_next]), torch.tensor(y)


def collate(batch):
    xs, promo_next, ys = zip(*batch)
    lengths = torch.tensor([len(x) for x in xs], dtype=torch.long)
    return pad_sequence(xs, batch_first=True), lengths, torch.stack(promo_next), torch.stack(ys)


class DemandLSTM(nn.Module):
    def __init__(self, n_features=4, hidden=HIDDEN):
        super().__init__()
        self.lstm = nn.LSTM(n_features, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden + 1, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x, lengths, promo_next):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        log_rate = self.head(torch.cat([h_n[-1], promo_next], dim=-1)).squeeze(-1)
        return torch.exp(log_rate.clamp(max=10.0))  # Poisson rate, units/day


criterion = nn.PoissonNLLLoss()


def loss_fn(model, batch):
    x, lengths, promo_next, y = batch
    rate = model(x, lengths, promo_next)
    return criterion(rate, y)


def build_loaders():
    sales = simulate_sales(SEED)
    train_w, val_w = make_windows(sales, SEED)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(WindowDataset(train_w), batch_size=BATCH_SIZE, shuffle=True,
                              collate_fn=collate, generator=g)
    val_loader = DataLoader(WindowDataset(val_w), batch_size=256, shuffle=False, collate_fn=collate)
    return train_loader, val_loader


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = DemandLSTM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    t0 = time.time()
    losses, abs_err, sq_err, n = 0.0, 0.0, 0.0, 0
    for x, lengths, promo_next, y in loader:
        rate = model(x, lengths, promo_next)
        losses += criterion(rate, y).item() * len(y)
        abs_err += (rate - y).abs().sum().item()
        sq_err += ((rate - y) ** 2).sum().item()
        n += len(y)
    return {"eval_loss": round(losses / n, 4), "eval_mae": round(abs_err / n, 4),
            "eval_rmse": round(math.sqrt(sq_err / n), 4), "eval_runtime": round(time.time() - t0, 4)}


def main():
    target = make_target()
    model, optimizer = target["model"], target["optimizer"]
    train_loader, val_loader = target["data"], target["val_data"]
    steps_per_epoch = len(train_loader)
    total_steps = EPOCHS * steps_per_epoch

    def lr_lambda(step):
        if step < WARMUP_STEPS:
            return (step + 1) / WARMUP_STEPS
        return max(0.0, (total_steps - step) / (total_steps - WARMUP_STEPS))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    print(f"***** Running training *****\n  Num examples = {len(train_loader.dataset)}\n"
          f"  Num Epochs = {EPOCHS}\n  Batch size = {BATCH_SIZE}\n  Total optimization steps = {total_steps}")
    step, t_start, run_loss, run_n, all_loss = 0, time.time(), 0.0, 0, 0.0
    for epoch in range(EPOCHS):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            step += 1
            run_loss += loss.item()
            all_loss += loss.item()
            run_n += 1
            if step % LOG_EVERY == 0:
                print({"loss": round(run_loss / run_n, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0], "epoch": round(step / steps_per_epoch, 2)})
                run_loss, run_n = 0.0, 0
        metrics = evaluate(model, val_loader)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 4), "train_samples_per_second": round(total_steps * BATCH_SIZE / runtime, 3),
           "train_loss": round(all_loss / total_steps, 4), "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()

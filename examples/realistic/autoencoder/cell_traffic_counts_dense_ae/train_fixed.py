"""Dense autoencoder over daily 15-min session-count profiles of mobile radio cells.

Each sample is one (cell, day): 96 bins of session-setup counts. The decoder outputs
non-negative expected counts and is trained with a Poisson likelihood; the reconstruction
rates are later used as the 'expected traffic' baseline for per-bin anomaly scoring.
"""
import math
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 11
N_CELLS = 300
N_DAYS = 28
BINS = 96
HIDDEN = (128, 64)
LATENT = 8
BATCH_SIZE = 64
EPOCHS = 12
LR = 1e-3
WARMUP_RATIO = 0.05
LOGGING_STEPS = 40

torch.set_num_threads(1)
torch.manual_seed(SEED)


def simulate_counts(seed=SEED):
    g = np.random.default_rng(seed)
    h = np.arange(BINS) / 4.0
    bump = lambda mu, s: np.exp(-0.5 * ((h - mu) / s) ** 2)
    shapes = {
        "residential": 0.15 + 0.6 * bump(8, 1.5) + 1.0 * bump(20.5, 2.5),
        "business": 0.05 + 1.0 * bump(10, 2.0) + 0.9 * bump(15, 2.0),
        "transport": 0.08 + 1.2 * bump(8, 0.8) + 1.1 * bump(18, 0.9),
        "nightlife": 0.10 + 0.4 * bump(13, 3) + 1.2 * bump(23.5, 1.8),
    }
    kinds = list(shapes)
    rows = []
    for cell in range(N_CELLS):
        kind = kinds[g.integers(len(kinds))]
        scale = np.exp(g.normal(1.8, 0.8))
        phase = g.normal(0, 0.5)
        base = np.interp(h, h + phase, shapes[kind], period=24)
        for day in range(N_DAYS):
            weekend = day % 7 >= 5
            prof = base.copy()
            if weekend:
                prof = 0.6 * prof + 0.25 * bump(14, 4)
            lam = scale * prof * np.exp(g.normal(0, 0.15)) * np.exp(g.normal(0, 0.1, size=BINS))
            rows.append((cell, kind, day, *g.poisson(lam)))
    cols = ["cell_id", "cell_type", "day"] + [f"b{i:02d}" for i in range(BINS)]
    return pd.DataFrame(rows, columns=cols)


def build_loaders():
    df = simulate_counts()
    bin_cols = [c for c in df.columns if c.startswith("b")]
    val_mask = df["day"] >= N_DAYS - 7
    train_counts = torch.tensor(df.loc[~val_mask, bin_cols].to_numpy(np.float32))
    val_counts = torch.tensor(df.loc[val_mask, bin_cols].to_numpy(np.float32))
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(TensorDataset(train_counts), batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_dl = DataLoader(TensorDataset(val_counts), batch_size=512)
    return train_dl, val_dl


class CountAutoencoder(nn.Module):
    def __init__(self, n_in=BINS, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        h1, h2 = hidden
        self.encoder = nn.Sequential(
            nn.Linear(n_in, h1), nn.SiLU(),
            nn.Linear(h1, h2), nn.SiLU(),
            nn.Linear(h2, latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, h2), nn.SiLU(),
            nn.Linear(h2, h1), nn.SiLU(),
            nn.Linear(h1, n_in),
        )

    def forward(self, counts):
        z = self.encoder(torch.log1p(counts))
        return F.softplus(self.decoder(z))


def loss_fn(model, batch):
    (counts,) = batch
    rate = model(counts)
    return F.poisson_nll_loss(rate, counts, log_input=False)


def make_target():
    train_dl, val_dl = build_loaders()
    model = CountAutoencoder()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    return {"model": model, "data": train_dl, "val_data": val_dl, "loss_fn": loss_fn,
            "optimizer": optimizer, "task": "regression"}


@torch.no_grad()
def evaluate(model, dl):
    t = time.time()
    model.eval()
    losses, abs_err, n, n_rows = [], 0.0, 0, 0
    for batch in dl:
        (counts,) = batch
        rate = model(counts)
        losses.append(loss_fn(model, batch).item() * len(counts))
        abs_err += (rate - counts).abs().sum().item()
        n += counts.numel()
        n_rows += len(counts)
    model.train()
    rt = time.time() - t
    return {"eval_loss": round(sum(losses) / n_rows, 4), "eval_mae": round(abs_err / n, 4),
            "eval_runtime": round(rt, 4), "eval_samples_per_second": round(n_rows / rt, 3)}


def main():
    t0 = time.time()
    tgt = make_target()
    model, train_dl, val_dl, opt = tgt["model"], tgt["data"], tgt["val_data"], tgt["optimizer"]
    total = EPOCHS * len(train_dl)
    warmup = int(WARMUP_RATIO * total)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))
    print(f"***** Running training *****\n  Num examples = {len(train_dl.dataset)}\n  Num Epochs = {EPOCHS}\n"
          f"  Instantaneous batch size = {BATCH_SIZE}\n  Total optimization steps = {total}")
    step, run_loss, run_n, all_loss = 0, 0.0, 0, 0.0
    for epoch in range(EPOCHS):
        for batch in train_dl:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            run_loss += loss.item(); run_n += 1; all_loss += loss.item()
            if step % LOGGING_STEPS == 0:
                print({"loss": round(run_loss / run_n, 4), "grad_norm": round(gn.item(), 4),
                       "learning_rate": sched.get_last_lr()[0], "epoch": round(step / len(train_dl), 2)})
                run_loss, run_n = 0.0, 0
        print({**evaluate(model, val_dl), "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 4), "train_samples_per_second": round(EPOCHS * len(train_dl.dataset) / rt, 3),
           "train_loss": round(all_loss / step, 4), "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()

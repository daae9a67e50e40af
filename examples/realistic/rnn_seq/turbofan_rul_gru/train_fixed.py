"""Remaining-useful-life regression for turbofan engines (C-MAPSS style run-to-failure data).

GRU over the last <=WINDOW cycles of sensor history, piecewise-linear RUL target capped at RUL_CAP.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 11
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
N_TRAIN_UNITS, N_TEST_UNITS = 100, 60
SENSORS = [f"s{i}" for i in range(1, 12)]
WINDOW = 30
MIN_CYCLES = 15
STRIDE = 5
RUL_CAP = 125.0
BATCH_SIZE = 128
EPOCHS = 16
LR = 2e-3

torch.set_num_threads(1)


BASELINE = np.array([518.7, 642.5, 1589.8, 1400.6, 553.4, 2388.1, 9046.2, 47.5, 521.7, 8138.6, 392.0])


def simulate_fleet(rng, n_units, truncate=False):
    """Run-to-failure sensor trajectories; test units are cut before failure."""
    base = BASELINE
    sens = np.array([6.0, -4.5, 0.0, 3.0, 5.5, 0.0, -3.5, 2.5, 0.0, 4.0, -5.0])
    noise = np.array([1.6, 1.5, 1.0, 1.2, 1.8, 0.8, 1.4, 1.1, 1.0, 1.5, 1.7])
    rows, ruls = [], []
    for unit in range(1, n_units + 1):
        life = int(rng.integers(128, 362))
        a = rng.uniform(3.0, 5.0)
        wear0 = rng.uniform(0.0, 0.08)
        offset = rng.normal(0, 0.8, len(SENSORS))
        t = np.arange(1, life + 1)
        hi = wear0 + (np.exp(a * t / life) - 1) / (np.exp(a) - 1)
        x = base + offset + np.outer(hi, sens) + rng.normal(0, 1, (life, len(SENSORS))) * noise
        if truncate:
            rul = int(rng.integers(5, 141))
            keep = max(life - rul, MIN_CYCLES + 5)
            rul = life - keep
            x, t = x[:keep], t[:keep]
            ruls.append(rul)
        rows.append(np.column_stack([np.full(len(t), unit), t, x]))
    df = pd.DataFrame(np.concatenate(rows), columns=["unit", "cycle", *SENSORS])
    df = df.astype({"unit": int, "cycle": int})
    return df, np.array(ruls)


def ensure_data():
    paths = [os.path.join(DATA_DIR, f) for f in ("train_FD.csv", "test_FD.csv", "RUL_FD.csv")]
    if not all(os.path.exists(p) for p in paths):
        os.makedirs(DATA_DIR, exist_ok=True)
        rng = np.random.default_rng(SEED)
        train_df, _ = simulate_fleet(rng, N_TRAIN_UNITS)
        test_df, test_rul = simulate_fleet(rng, N_TEST_UNITS, truncate=True)
        train_df.to_csv(paths[0], index=False, float_format="%.3f")
        test_df.to_csv(paths[1], index=False, float_format="%.3f")
        pd.DataFrame({"RUL": test_rul}).to_csv(paths[2], index=False)
    return [pd.read_csv(p) for p in paths]


def add_rul(df):
    df = df.copy()
    df["RUL"] = df.groupby("unit")["cycle"].transform("max") - df["cycle"]
    df["RUL"] = df["RUL"].clip(upper=RUL_CAP)
    return df


class WindowDataset(Dataset):
    def __init__(self, windows, targets):
        self.windows = windows
        self.targets = targets

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, i):
        return torch.from_numpy(self.windows[i]), torch.tensor(self.targets[i], dtype=torch.float32)


def make_train_windows(df):
    windows, targets = [], []
    for _, g in df.groupby("unit"):
        x = g[SENSORS].to_numpy(dtype=np.float32)
        y = g["RUL"].to_numpy(dtype=np.float32)
        for end in range(MIN_CYCLES, len(g) + 1, STRIDE):
            windows.append(x[max(0, end - WINDOW):end])
            targets.append(y[end - 1] / RUL_CAP)
    return windows, targets


def make_test_windows(df, rul):
    windows = []
    for _, g in df.groupby("unit"):
        windows.append(g[SENSORS].to_numpy(dtype=np.float32)[-WINDOW:])
    return windows, list(np.minimum(rul, RUL_CAP).astype(np.float32) / RUL_CAP)


def collate(batch):
    xs, ys = zip(*batch)
    lengths = torch.tensor([len(x) for x in xs])
    return pad_sequence(xs, batch_first=True), lengths, torch.stack(ys)


class RULGRU(nn.Module):
    def __init__(self, n_features, hidden=32):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.head(h_n[-1]).squeeze(-1)


def build_data():
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    train_raw, test_raw, rul_df = ensure_data()
    train_df = add_rul(train_raw)
    mu = train_df[SENSORS].mean()
    sd = train_df[SENSORS].std()
    train_df[SENSORS] = (train_df[SENSORS] - mu) / sd
    test_df = test_raw.copy()
    test_df[SENSORS] = (test_df[SENSORS] - mu) / sd
    tr_w, tr_y = make_train_windows(train_df)
    te_w, te_y = make_test_windows(test_df, rul_df["RUL"].to_numpy())
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(WindowDataset(tr_w, tr_y), batch_size=BATCH_SIZE, shuffle=True,
                              collate_fn=collate, generator=g)
    test_loader = DataLoader(WindowDataset(te_w, te_y), batch_size=256, shuffle=False, collate_fn=collate)
    return train_loader, test_loader


mse = nn.MSELoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    return mse(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=1e-4)


def make_target():
    train_loader, test_loader = build_data()
    model = RULGRU(len(SENSORS))
    return {
        "model": model,
        "data": train_loader,
        "val_data": test_loader,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    preds, ys = [], []
    for x, lengths, y in loader:
        preds.append(model(x, lengths))
        ys.append(y)
    model.train()
    p = torch.cat(preds) * RUL_CAP
    t = torch.cat(ys) * RUL_CAP
    rmse = torch.sqrt(((p - t) ** 2).mean()).item()
    d = p - t
    score = torch.where(d < 0, torch.exp(-d / 13) - 1, torch.exp(d / 10) - 1).sum().item()
    return rmse, score


if __name__ == "__main__":
    t0 = time.time()
    train_loader, test_loader = build_data()
    model = RULGRU(len(SENSORS))
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, epochs=EPOCHS,
                                                    steps_per_epoch=len(train_loader))
    print(f"train windows: {len(train_loader.dataset)} | test units: {len(test_loader.dataset)} | "
          f"params: {sum(p.numel() for p in model.parameters())}")
    for epoch in range(1, EPOCHS + 1):
        ep_t = time.time()
        tot, n = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            tot += loss.item() * len(batch[2])
            n += len(batch[2])
        train_rmse = (tot / n) ** 0.5 * RUL_CAP
        if epoch == 1 or epoch % 2 == 0 or epoch == EPOCHS:
            rmse, score = evaluate(model, test_loader)
            print(f"epoch {epoch:3d} | train_mse {tot / n:.5f} | train_rmse {train_rmse:6.2f} | "
                  f"test_rmse {rmse:6.2f} | test_score {score:9.1f} | lr {scheduler.get_last_lr()[0]:.2e} | "
                  f"{time.time() - ep_t:.1f}s")
        else:
            print(f"epoch {epoch:3d} | train_mse {tot / n:.5f} | train_rmse {train_rmse:6.2f} | "
                  f"lr {scheduler.get_last_lr()[0]:.2e} | {time.time() - ep_t:.1f}s")
    print(f"done in {time.time() - t0:.1f}s")

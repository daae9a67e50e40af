"""Convolutional autoencoder for wafer-map anomaly detection.

Train on wafers the yield team tagged as failure_type == "none", score the
engineer-reviewed hold-out set by reconstruction error.
Maps are 32x32 die grids: 0 = off-wafer, 0.5 = passing die, 1 = failing die.
"""
import os
import sys
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 11
GRID = 32
HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")
MAPS_NPZ = os.path.join(DATA_DIR, "probe_maps.npz")
META_CSV = os.path.join(DATA_DIR, "probe_meta.csv")
REVIEWED_NPZ = os.path.join(DATA_DIR, "reviewed_holdout.npz")

PATTERNS = ["none", "center", "edge_ring", "donut", "edge_loc", "scratch"]

CFG = dict(batch_size=64, epochs=24, lr=3e-3, weight_decay=1e-4, n_val_lots=12, latent_ch=8)


# ---------------------------------------------------------------------------
# synthetic probe export
# ---------------------------------------------------------------------------
_yy, _xx = np.mgrid[0:GRID, 0:GRID]
_r = np.hypot(_yy - (GRID - 1) / 2, _xx - (GRID - 1) / 2) / (GRID / 2)
_theta = np.arctan2(_yy - (GRID - 1) / 2, _xx - (GRID - 1) / 2)
ON_WAFER = _r <= 0.97


def render_wafer(pattern, rng):
    p_fail = 0.03 + 0.03 * rng.random() + 0.04 * _r ** 4
    if pattern == "center":
        rad = rng.uniform(0.2, 0.4)
        p_fail = np.where(_r < rad, 0.97, p_fail)
    elif pattern == "edge_ring":
        inner = rng.uniform(0.75, 0.85)
        p_fail = np.where(_r > inner, 0.97, p_fail)
    elif pattern == "donut":
        a = rng.uniform(0.35, 0.5)
        p_fail = np.where((_r > a) & (_r < a + 0.22), 0.97, p_fail)
    elif pattern == "edge_loc":
        th = rng.uniform(-np.pi, np.pi)
        dth = np.abs(np.angle(np.exp(1j * (_theta - th))))
        p_fail = np.where((_r > 0.65) & (dth < rng.uniform(0.3, 0.6)), 0.97, p_fail)
    elif pattern == "scratch":
        ang = rng.uniform(0, np.pi)
        off = rng.uniform(-6, 6)
        d = np.abs((_xx - GRID / 2) * np.sin(ang) - (_yy - GRID / 2) * np.cos(ang) - off)
        along = (_xx - GRID / 2) * np.cos(ang) + (_yy - GRID / 2) * np.sin(ang)
        start = rng.uniform(-12, 0)
        p_fail = np.where((d < 1.0) & (along > start) & (along < start + rng.uniform(10, 20)), 0.97, p_fail)
    fails = rng.random((GRID, GRID)) < p_fail
    m = np.where(fails, 1.0, 0.5)
    return np.where(ON_WAFER, m, 0.0).astype(np.float32)


def write_synthetic_exports():
    os.makedirs(DATA_DIR, exist_ok=True)
    rng = np.random.default_rng(SEED)
    rows, maps = [], []
    n_lots, per_lot = 90, 25
    base = pd.Timestamp("2024-03-04 06:00")
    for lot in range(n_lots):
        # lots with a process excursion carry a dominant signature
        excursion = rng.random() < 0.55
        sig = rng.choice(PATTERNS[1:])
        tool_offset = rng.uniform(0, 72 * 60)
        for w in range(1, per_lot + 1):
            if excursion and rng.random() < 0.7:
                pat = sig
            elif rng.random() < 0.12:
                pat = rng.choice(PATTERNS[1:])
            else:
                pat = "none"
            t = base + pd.Timedelta(minutes=tool_offset + 7 * w + rng.uniform(0, 3))
            rows.append(dict(lot_id=f"L{24000 + lot * 7:05d}", wafer_no=w, probe_time=t,
                             failure_type=pat))
            maps.append(render_wafer(pat, rng))
    meta = pd.DataFrame(rows)
    maps = np.stack(maps)
    # prober export is in probe order
    order = np.argsort(meta["probe_time"].to_numpy(), kind="stable")
    meta = meta.iloc[order].reset_index(drop=True)
    maps = maps[order]
    meta.to_csv(META_CSV, index=False)
    np.savez_compressed(MAPS_NPZ, maps=maps)

    # engineer-reviewed hold-out, shipped as one file
    labels = rng.choice(len(PATTERNS), size=800, p=[0.5, 0.1, 0.1, 0.1, 0.1, 0.1])
    held = np.stack([render_wafer(PATTERNS[k], rng) for k in labels])
    np.savez_compressed(REVIEWED_NPZ, maps=held, labels=labels)


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def load_probe_export():
    maps = np.load(MAPS_NPZ)["maps"]
    meta = pd.read_csv(META_CSV, parse_dates=["probe_time"])
    meta = meta.sort_values(["lot_id", "wafer_no"]).reset_index(drop=True)
    return maps, meta


def build_data(cfg):
    if not all(os.path.exists(p) for p in (MAPS_NPZ, META_CSV, REVIEWED_NPZ)):
        write_synthetic_exports()
    maps, meta = load_probe_export()

    clean = (meta["failure_type"] == "none").to_numpy()
    lots = meta["lot_id"].unique()
    val_lots = lots[-cfg["n_val_lots"]:]
    is_val = meta["lot_id"].isin(val_lots).to_numpy()

    x_train = torch.from_numpy(maps[clean & ~is_val]).unsqueeze(1)
    x_val = torch.from_numpy(maps[clean & is_val]).unsqueeze(1)

    held = np.load(REVIEWED_NPZ)
    x_test = torch.from_numpy(held["maps"]).unsqueeze(1)
    y_test = (held["labels"] != PATTERNS.index("none")).astype(int)

    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(x_train), batch_size=cfg["batch_size"], shuffle=True,
                              generator=g, drop_last=True)
    val_loader = DataLoader(TensorDataset(x_val), batch_size=256)
    return train_loader, val_loader, x_test, y_test


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class WaferAE(nn.Module):
    def __init__(self, latent_ch=8):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 16, 3, stride=2, padding=1), nn.ReLU(),   # 16x16
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),  # 8x8
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),  # 4x4
            nn.Conv2d(32, latent_ch, 1),
        )
        self.decoder = nn.Sequential(
            nn.Conv2d(latent_ch, 32, 1), nn.ReLU(),
            nn.ConvTranspose2d(32, 32, 4, stride=2, padding=1), nn.ReLU(),  # 8x8
            nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1), nn.ReLU(),  # 16x16
            nn.ConvTranspose2d(16, 1, 4, stride=2, padding=1),              # 32x32
        )

    def forward(self, x):
        return torch.sigmoid(self.decoder(self.encoder(x)))


def loss_fn(model, batch):
    (x,) = batch
    return F.mse_loss(model(x), x)


@torch.no_grad()
def score(model, x):
    model.eval()
    out = torch.cat([model(x[i:i + 256]) for i in range(0, len(x), 256)])
    return ((out - x) ** 2).flatten(1).mean(1).numpy()


def roc_auc(y, s):
    ranks = pd.Series(s).rank().to_numpy()
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    return (ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader, _, _ = build_data(CFG)
    model = WaferAE(CFG["latent_ch"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG["lr"], weight_decay=CFG["weight_decay"])
    return dict(model=model, data=train_loader, val_data=val_loader, loss_fn=loss_fn,
                optimizer=optimizer, task="reconstruction")


def _bar(done, total, elapsed, postfix, width=10):
    filled = int(width * done / total)
    rate = done / max(elapsed, 1e-9)
    m, s = divmod(int(elapsed), 60)
    return (f"{100 * done // total:3d}%|{'█' * filled}{' ' * (width - filled)}| {done}/{total} "
            f"[{m:02d}:{s:02d}<00:00, {rate:.2f}it/s, {postfix}]")


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_loader, val_loader, x_test, y_test = build_data(CFG)
    model = WaferAE(CFG["latent_ch"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG["lr"], weight_decay=CFG["weight_decay"])
    total_steps = CFG["epochs"] * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=CFG["lr"], total_steps=total_steps,
                                                    pct_start=0.2)
    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name    | Type       | Params")
    print("-----------------------------------")
    print(f"0 | encoder | Sequential | {sum(p.numel() for p in model.encoder.parameters()):,}")
    print(f"1 | decoder | Sequential | {sum(p.numel() for p in model.decoder.parameters()):,}")
    print("-----------------------------------")
    print(f"{n_params:,}    Trainable params")
    print(f"train wafers: {len(train_loader.dataset)}  val wafers: {len(val_loader.dataset)}  "
          f"reviewed hold-out: {len(y_test)}")

    n = len(train_loader)
    for epoch in range(CFG["epochs"]):
        model.train()
        t0 = time.time()
        losses = []
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            val_loss = sum(loss_fn(model, b).item() * len(b[0]) for b in val_loader) / len(val_loader.dataset)
        postfix = (f"v_num=0, train_loss={np.mean(losses[-10:]):.4f}, val_loss={val_loss:.4f}, "
                   f"train_loss_epoch={np.mean(losses):.4f}")
        sys.stdout.write(f"Epoch {epoch}: {_bar(n, n, time.time() - t0, postfix)}\n")
        sys.stdout.flush()
    print(f"`Trainer.fit` stopped: `max_epochs={CFG['epochs']}` reached.")

    s = score(model, x_test)
    auc = roc_auc(y_test, s)
    thr = np.quantile(score(model, val_loader.dataset.tensors[0]), 0.95)
    pred = s > thr
    print("─" * 40)
    print(f"{'Test metric':<22}{'DataLoader 0':>18}")
    print("─" * 40)
    print(f"{'test_auroc':<22}{auc:>18.4f}")
    print(f"{'test_recall@val95':<22}{pred[y_test == 1].mean():>18.4f}")
    print(f"{'test_fpr@val95':<22}{pred[y_test == 0].mean():>18.4f}")
    print(f"{'test_recon_mse_normal':<22}{s[y_test == 0].mean():>18.5f}")
    print("─" * 40)


if __name__ == "__main__":
    main()

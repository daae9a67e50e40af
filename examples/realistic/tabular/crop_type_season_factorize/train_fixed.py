"""Crop-type classification from per-field satellite and agronomy features.

The GIS team exports one CSV per growing season (`fields_<season>.csv`): one
row per surveyed field with monthly Sentinel-2 NDVI means (Apr-Sep), terrain,
soil and weather aggregates and the surveyed crop. We train on the 2022
season and validate on the 2023 season (out-of-season check). Small MLP,
Adam + ReduceLROnPlateau, plain-print logs.
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
    seed=5,
    train_season=2022,
    val_season=2023,
    n_fields={2022: 4000, 2023: 1500},
    batch_size=32,
    epochs=20,
    lr=5e-4,
    hidden=64,
    dropout=0.2,
)

CROPS = ["winter_wheat", "maize", "soybean", "spring_barley", "rapeseed"]
CROP_P = [0.34, 0.26, 0.18, 0.13, 0.09]
REGIONS = ["north_plain", "river_valley", "east_hills", "south_plateau"]
SOILS = ["loam", "clay", "sandy_loam", "silt", "peat"]
MONTHS = ["apr", "may", "jun", "jul", "aug", "sep"]
# mean NDVI phenology per crop, Apr..Sep
PHENOLOGY = np.array([
    [0.55, 0.78, 0.80, 0.55, 0.25, 0.22],   # winter wheat: early peak, harvested July
    [0.18, 0.25, 0.55, 0.82, 0.80, 0.60],   # maize: late peak
    [0.17, 0.22, 0.45, 0.75, 0.78, 0.50],   # soybean: late, a bit lower
    [0.25, 0.60, 0.78, 0.60, 0.28, 0.24],   # spring barley: a month after wheat
    [0.65, 0.72, 0.62, 0.35, 0.30, 0.40],   # rapeseed: very early, flowering dip
])


def write_season(out_dir, season, n, seed):
    rng = np.random.default_rng(seed * 100 + season)
    region = rng.integers(0, len(REGIONS), n)
    region_bias = np.array([[0.1, 0.0, -0.1, 0.0, 0.0], [-0.1, 0.15, 0.1, -0.1, -0.05],
                            [0.05, -0.1, -0.1, 0.1, 0.1], [0.0, 0.05, 0.0, 0.0, -0.05]])
    p = np.clip(np.array(CROP_P)[None, :] + region_bias[region], 0.01, None)
    p /= p.sum(1, keepdims=True)
    crop = (rng.random(n)[:, None] > p.cumsum(1)).sum(1).clip(0, len(CROPS) - 1)
    season_shift = rng.normal(0, 0.03)  # wetter / drier year
    ndvi = PHENOLOGY[crop] + season_shift + rng.normal(0, 0.11, (n, 6))
    shift = rng.integers(-1, 2, n)  # sowing date variation moves the curve by a month for some fields
    ndvi = np.where((shift != 0)[:, None], np.roll(ndvi, 1, axis=1) * 0.5 + ndvi * 0.5, ndvi)
    cloud = rng.random((n, 6)) < 0.07
    ndvi = np.clip(ndvi, 0.05, 0.95).round(3).astype(object)
    ndvi[cloud] = np.nan  # fully clouded months

    soil = rng.integers(0, len(SOILS), n)
    elevation = np.clip(rng.normal(np.array([120, 80, 340, 260])[region], 40), 5, None).round()
    df = pd.DataFrame({
        "field_id": [f"F{season}-{i:05d}" for i in range(n)],
        "region": np.array(REGIONS)[region], "soil_type": np.array(SOILS)[soil],
        "area_ha": np.round(np.exp(rng.normal(2.2, 0.7, n)), 2), "elevation_m": elevation,
        "slope_deg": np.clip(rng.gamma(1.5, 1.5, n), 0, 25).round(1),
        "precip_mm": (rng.normal(520, 60, n) + 80 * season_shift / 0.03).round(),
        "gdd_base5": (rng.normal(1900, 120, n) - 0.8 * elevation).round(),
        "irrigated": (rng.random(n) < 0.08 + 0.2 * (crop == 1)).astype(int),
    })
    for j, m in enumerate(MONTHS):
        df[f"ndvi_{m}"] = ndvi[:, j]
    df["crop"] = np.array(CROPS)[crop]
    path = os.path.join(out_dir, f"fields_{season}.csv")
    df.to_csv(path, index=False)
    return path


NDVI_COLS = [f"ndvi_{m}" for m in MONTHS]
NUMERIC = ["area_ha", "elevation_m", "slope_deg", "precip_mm", "gdd_base5"] + NDVI_COLS


def encode(frame):
    num = frame[NUMERIC].astype(float).copy()
    num["area_ha"] = np.log(num["area_ha"])
    # clouded months: fill from the neighbouring months of the same field
    num[NDVI_COLS] = num[NDVI_COLS].T.interpolate(limit_direction="both").T
    cats = pd.get_dummies(pd.DataFrame({
        "region": pd.Categorical(frame["region"], categories=REGIONS),
        "soil": pd.Categorical(frame["soil_type"], categories=SOILS)}), dtype=float)
    feats = pd.concat([num, cats, frame[["irrigated"]].astype(float)], axis=1)
    labels, classes = pd.factorize(frame["crop"], sort=True)
    return feats, labels, list(classes)


def build_tensors(cfg, data_dir):
    tr = pd.read_csv(write_season(data_dir, cfg["train_season"], cfg["n_fields"][cfg["train_season"]], cfg["seed"]))
    va = pd.read_csv(write_season(data_dir, cfg["val_season"], cfg["n_fields"][cfg["val_season"]], cfg["seed"]))
    X_tr, y_tr, classes = encode(tr)
    X_va, y_va, _ = encode(va)
    n_num = len(NUMERIC)
    mu, sd = X_tr.iloc[:, :n_num].mean(), X_tr.iloc[:, :n_num].std() + 1e-6
    X_tr.iloc[:, :n_num] = (X_tr.iloc[:, :n_num] - mu) / sd
    X_va.iloc[:, :n_num] = (X_va.iloc[:, :n_num] - mu) / sd
    to_t = lambda X, y: (torch.tensor(X.to_numpy(dtype=np.float32)), torch.tensor(y, dtype=torch.long))
    return to_t(X_tr, y_tr), to_t(X_va, y_va), classes


class CropMLP(nn.Module):
    def __init__(self, d_in, hidden, n_classes, dropout):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.net(x)


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), _, classes = build_tensors(cfg, tmp)
    model = CropMLP(X_tr.shape[1], cfg["hidden"], len(classes), cfg["dropout"])
    bs = cfg["batch_size"]
    data = [(X_tr[i * bs:(i + 1) * bs], y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.Adam(model.parameters(), lr=cfg["lr"]),
            "task": "classification", "num_classes": len(classes)}


@torch.no_grad()
def evaluate(model, X, y, n_classes):
    model.eval()
    logits = model(X)
    model.train()
    pred = logits.argmax(1)
    recalls = [(pred[y == c] == c).float().mean().item() for c in range(n_classes) if (y == c).any()]
    return criterion(logits, y).item(), (pred == y).float().mean().item(), float(np.mean(recalls))


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
        (X_tr, y_tr), (X_va, y_va), classes = build_tensors(cfg, tmp)
    print(f"season {cfg['train_season']}: {len(y_tr)} fields (train) | season {cfg['val_season']}: "
          f"{len(y_va)} fields (val) | {X_tr.shape[1]} features | classes: {', '.join(classes)}")

    train_dl = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_tr, y_tr), batch_size=cfg["batch_size"], shuffle=True,
        generator=torch.Generator().manual_seed(cfg["seed"]))
    model = CropMLP(X_tr.shape[1], cfg["hidden"], len(classes), cfg["dropout"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=3)

    for epoch in range(1, cfg["epochs"] + 1):
        tot, correct, n = 0.0, 0, 0
        for xb, yb in train_dl:
            logits = model(xb)
            loss = criterion(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            n += len(yb)
        val_loss, val_acc, val_bacc = evaluate(model, X_va, y_va, len(classes))
        sched.step(val_loss)
        print(f"epoch {epoch:2d} | train loss {tot / n:.4f} | train acc {correct / n:.3f} | "
              f"val loss {val_loss:.4f} | val acc {val_acc:.3f} | val bal acc {val_bacc:.3f} | "
              f"lr {opt.param_groups[0]['lr']:.1e}")
    print(f"done in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()

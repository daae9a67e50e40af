"""Daily electricity forecast per building (kWh) from weather, occupancy and building registry data.

MLP on standardised numerics + embeddings for use type / climate zone. Target is
log(kWh), standardised with train statistics; validation is on held-out buildings.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 42
ROOT = os.path.dirname(os.path.abspath(__file__))
CAT_COLS = ["use_type", "climate_zone"]
NUM_COLS = ["outdoor_temp_c", "rel_humidity", "occupancy_rate", "log_floor_area", "building_age",
            "has_chiller", "is_weekend", "dow_sin", "dow_cos"]
BATCH_SIZE = 256
MAX_EPOCHS = 15
MAX_LR = 3e-3


def load_readings():
    meter = pd.read_csv(os.path.join(ROOT, "meter_daily.csv"), parse_dates=["date"])
    buildings = pd.read_csv(os.path.join(ROOT, "buildings.csv"))
    df = meter.merge(buildings, on="building_id", how="left", validate="many_to_one")
    dow = df["date"].dt.day_of_week
    df["is_weekend"] = (dow >= 5).astype(np.float32)
    df["dow_sin"] = np.sin(2 * np.pi * dow / 7)
    df["dow_cos"] = np.cos(2 * np.pi * dow / 7)
    df["log_floor_area"] = np.log(df["floor_area_m2"])
    df["building_age"] = df["date"].dt.year - df["year_built"]
    df["has_chiller"] = df["has_chiller"].astype(np.float32)
    df["log_kwh"] = np.log(df["kwh"])
    return df


def split_by_building(df, val_frac=0.2):
    # hold out whole buildings so validation measures generalisation to unseen sites
    ids = df["building_id"].drop_duplicates().sample(frac=1.0, random_state=SEED).values
    n_val = int(len(ids) * val_frac)
    val_mask = df["building_id"].isin(ids[:n_val])
    return df[~val_mask].reset_index(drop=True), df[val_mask].reset_index(drop=True)


class FeaturePipeline:
    def fit(self, df):
        self.levels = {c: {v: i for i, v in enumerate(sorted(df[c].unique()))} for c in CAT_COLS}
        self.num_mean = df[NUM_COLS].mean()
        self.num_std = df[NUM_COLS].std()
        self.y_mean = df["log_kwh"].mean()
        self.y_std = df["log_kwh"].std()
        return self

    def transform(self, df):
        x_num = ((df[NUM_COLS] - self.num_mean) / self.num_std).to_numpy(dtype=np.float32)
        x_cat = np.stack([df[c].map(self.levels[c]).to_numpy(dtype=np.int64) for c in CAT_COLS], axis=1)
        y = ((df["log_kwh"] - self.y_mean) / self.y_std).to_numpy(dtype=np.float32)
        return TensorDataset(torch.from_numpy(x_num), torch.from_numpy(x_cat), torch.from_numpy(y))

    def to_kwh(self, y_scaled):
        return torch.exp(y_scaled * self.y_std + self.y_mean)


def build_data():
    df = load_readings()
    train_df, val_df = split_by_building(df)
    pipe = FeaturePipeline().fit(train_df)
    return pipe, pipe.transform(train_df), pipe.transform(val_df)


def train_loader(ds):
    return DataLoader(ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                      generator=torch.Generator().manual_seed(SEED))


class EnergyMLP(nn.Module):
    def __init__(self, cardinalities, n_num, emb_dim=4, hidden=256, dropout=0.3):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(c, emb_dim) for c in cardinalities])
        d_in = n_num + emb_dim * len(cardinalities)
        self.body = nn.Sequential(
            nn.Linear(d_in, hidden), nn.SiLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.SiLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.SiLU(), nn.Dropout(dropout),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, x_num, x_cat):
        h = torch.cat([x_num] + [e(x_cat[:, i]) for i, e in enumerate(self.embs)], dim=1)
        return self.body(h).squeeze(-1)


def loss_fn(model, batch):
    x_num, x_cat, y = batch
    return F.mse_loss(model(x_num, x_cat), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=MAX_LR, weight_decay=1e-4)


def new_model(pipe):
    return EnergyMLP([len(pipe.levels[c]) for c in CAT_COLS], len(NUM_COLS))


@torch.no_grad()
def validate(model, pipe, ds):
    model.eval()
    x_num, x_cat, y = ds.tensors
    pred = model(x_num, x_cat)
    loss = F.mse_loss(pred, y).item()
    kwh_true, kwh_pred = pipe.to_kwh(y), pipe.to_kwh(pred)
    mape = ((kwh_pred - kwh_true).abs() / kwh_true).mean().item() * 100
    mae = (kwh_pred - kwh_true).abs().mean().item()
    model.train()
    return loss, mape, mae


def make_target():
    torch.manual_seed(SEED)
    pipe, train_ds, _ = build_data()
    batches = []
    for b in train_loader(train_ds):
        batches.append(b)
        if len(batches) == 4:
            break
    return {
        "model": new_model(pipe),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    pipe, train_ds, val_ds = build_data()
    loader = train_loader(train_ds)
    model = new_model(pipe)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name  | Type       | Params\n  | model | EnergyMLP  | {n_params / 1e3:.1f} K")
    print(f"train samples: {len(train_ds)}, val samples: {len(val_ds)}")

    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=MAX_LR, total_steps=MAX_EPOCHS * len(loader),
                                                pct_start=0.2)
    for epoch in range(MAX_EPOCHS):
        t0 = time.time()
        losses = []
        for batch in loader:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
        val_loss, val_mape, val_mae = validate(model, pipe, val_ds)
        dt = time.time() - t0
        print(f"Epoch {epoch}: 100%|##########| {len(loader)}/{len(loader)} [00:{dt:04.1f}, {len(loader) / dt:.2f}it/s, "
              f"v_num=0, train_loss_epoch={np.mean(losses):.4f}, val_loss={val_loss:.4f}, "
              f"val_mape={val_mape:.2f}, val_mae_kwh={val_mae:.1f}, lr={sched.get_last_lr()[0]:.2e}]")
    print(f"`Trainer.fit` stopped: `max_epochs={MAX_EPOCHS}` reached.")


if __name__ == "__main__":
    main()

"""Motor insurance claim-severity regression.

policies.csv and vehicles.csv are joined on vehicle_id; the target is the
claim cost of each settled claim, modelled on log scale and standardised.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")

SEED = 1234
BATCH_SIZE = 128
EPOCHS = 12
LR = 1e-3
WEIGHT_DECAY = 1e-4
LOG_EVERY = 50

CAT_COLS = ["region", "coverage", "make", "body_type", "fuel"]
NUM_COLS = ["driver_age", "years_licensed", "annual_mileage", "prior_claims",
            "vehicle_age", "engine_kw", "vehicle_value", "deductible"]
TARGET = "claim_cost"


# --------------------------------------------------------------------------
# synthetic data export
# --------------------------------------------------------------------------
def generate_csvs(n_claims=14000, n_vehicles=9000, seed=3):
    rng = np.random.default_rng(seed)
    os.makedirs(DATA_DIR, exist_ok=True)

    makes = ["toyota", "ford", "vw", "bmw", "audi", "kia", "renault", "tesla", "volvo", "fiat"]
    make_premium = dict(zip(makes, [0.0, 0.05, 0.1, 0.45, 0.4, -0.05, -0.1, 0.6, 0.3, -0.2]))
    bodies = ["hatchback", "sedan", "suv", "van", "coupe"]
    body_eff = dict(zip(bodies, [-0.15, 0.0, 0.2, 0.25, 0.3]))
    fuels = ["petrol", "diesel", "hybrid", "electric"]

    veh = pd.DataFrame({
        "vehicle_id": np.arange(50000, 50000 + n_vehicles),
        "make": rng.choice(makes, n_vehicles),
        "body_type": rng.choice(bodies, n_vehicles, p=[0.3, 0.3, 0.25, 0.1, 0.05]),
        "fuel": rng.choice(fuels, n_vehicles, p=[0.5, 0.3, 0.15, 0.05]),
        "vehicle_age": rng.integers(0, 20, n_vehicles),
        "engine_kw": np.clip(rng.normal(95, 35, n_vehicles), 40, 350).round(),
    })
    veh["vehicle_value"] = (22000 * np.exp(veh.make.map(make_premium)) * np.exp(-0.09 * veh.vehicle_age)
                            * (veh.engine_kw / 95) ** 0.5 * rng.lognormal(0, 0.15, n_vehicles)).round(-1)

    regions = ["urban_core", "suburban", "rural", "coastal", "mountain", "industrial"]
    region_eff = dict(zip(regions, [0.35, 0.05, -0.25, 0.1, -0.1, 0.2]))
    coverages = ["third_party", "third_party_fire_theft", "comprehensive"]
    cov_eff = dict(zip(coverages, [-0.5, -0.2, 0.25]))

    age = np.clip(rng.normal(45, 15, n_claims), 18, 88).round()
    pol = pd.DataFrame({
        "claim_id": np.arange(n_claims),
        "vehicle_id": rng.choice(veh.vehicle_id.to_numpy(), n_claims),
        "driver_age": age,
        "years_licensed": np.clip(age - 18 - rng.integers(0, 8, n_claims), 0, None),
        "region": rng.choice(regions, n_claims),
        "coverage": rng.choice(coverages, n_claims, p=[0.2, 0.25, 0.55]),
        "annual_mileage": np.clip(rng.lognormal(9.3, 0.45, n_claims), 1000, 60000).round(-2),
        "prior_claims": rng.poisson(0.4, n_claims),
        "deductible": rng.choice([250, 500, 750, 1000, 1500], n_claims),
    })
    df = pol.merge(veh, on="vehicle_id", how="left")
    log_cost = (7.2
                + 0.55 * np.log(df.vehicle_value / 20000)
                + df.make.map(make_premium) * 0.5
                + df.body_type.map(body_eff)
                + df.region.map(region_eff)
                + df.coverage.map(cov_eff)
                + 0.35 * np.exp(-(df.driver_age - 18) / 6.0)
                + 0.12 * np.minimum(df.prior_claims, 3)
                + 0.25 * np.log(df.annual_mileage / 12000)
                + 0.2 * (df.fuel == "electric") * (df.vehicle_age < 4)
                - 0.15 * np.log(df.deductible / 500)
                + 0.3 * np.tanh((df.engine_kw - 150) / 40))
    pol[TARGET] = np.exp(log_cost + rng.normal(0, 0.35, n_claims)).round(2)

    pol.to_csv(os.path.join(DATA_DIR, "policies.csv"), index=False)
    veh.to_csv(os.path.join(DATA_DIR, "vehicles.csv"), index=False)


# --------------------------------------------------------------------------
# preprocessing
# --------------------------------------------------------------------------
def load_frame():
    if not os.path.exists(os.path.join(DATA_DIR, "policies.csv")):
        generate_csvs()
    policies = pd.read_csv(os.path.join(DATA_DIR, "policies.csv"))
    vehicles = pd.read_csv(os.path.join(DATA_DIR, "vehicles.csv"))
    df = policies.merge(vehicles, on="vehicle_id", how="left", validate="many_to_one")
    return df


def train_val_split(df, val_frac=0.15, seed=SEED):
    val_mask = np.random.default_rng(seed).random(len(df)) < val_frac
    return df[~val_mask].reset_index(drop=True), df[val_mask].reset_index(drop=True)


LOG_COLS = ["annual_mileage", "vehicle_value", "engine_kw"]


class TabularEncoder:
    def fit(self, df):
        self.cat_maps = {c: {v: i + 1 for i, v in enumerate(df[c].astype(str).value_counts().index)}
                         for c in CAT_COLS}
        num = self._numeric(df)
        self.num_mean, self.num_std = num.mean(0), num.std(0) + 1e-6
        log_y = np.log(df[TARGET].to_numpy())
        self.y_mean, self.y_std = log_y.mean(), log_y.std()
        return self

    @staticmethod
    def _numeric(df):
        num = df[NUM_COLS].astype(float).copy()
        for c in LOG_COLS:
            num[c] = np.log(num[c])
        return num.to_numpy()

    def transform(self, df):
        cats = np.stack([df[c].astype(str).map(self.cat_maps[c]).fillna(0).to_numpy(dtype=np.int64)
                         for c in CAT_COLS], axis=1)
        num = (self._numeric(df) - self.num_mean) / self.num_std
        y = (np.log(df[TARGET].to_numpy()) - self.y_mean) / self.y_std
        return cats, num.astype(np.float32), y.astype(np.float32)

    def to_cost(self, y_scaled):
        return np.exp(y_scaled * self.y_std + self.y_mean)

    @property
    def cardinalities(self):
        return [len(self.cat_maps[c]) + 1 for c in CAT_COLS]


class ClaimsDataset(Dataset):
    def __init__(self, cats, num, y):
        self.cats = torch.from_numpy(cats)
        self.num = torch.from_numpy(num)
        self.y = torch.from_numpy(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.cats[i], self.num[i], self.y[i]


def build_data():
    df = load_frame()
    train_df, val_df = train_val_split(df)
    enc = TabularEncoder().fit(train_df)
    return ClaimsDataset(*enc.transform(train_df)), ClaimsDataset(*enc.transform(val_df)), enc, val_df


def make_loader(ds, train):
    if train:
        return DataLoader(ds, batch_size=BATCH_SIZE, shuffle=True,
                          generator=torch.Generator().manual_seed(SEED), drop_last=True)
    return DataLoader(ds, batch_size=512, shuffle=False)


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class SeverityNet(nn.Module):
    def __init__(self, cardinalities, n_num, emb_dim=8, hidden=(128, 64), dropout=0.05):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(n, emb_dim) for n in cardinalities])
        layers, d = [], emb_dim * len(cardinalities) + n_num
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, 1)

    def forward(self, x_cat, x_num):
        x = torch.cat([e(x_cat[:, j]) for j, e in enumerate(self.embs)] + [x_num], dim=1)
        return self.head(self.body(x))


criterion = nn.MSELoss()


def loss_fn(model, batch):
    x_cat, x_num, y = batch
    pred = model(x_cat, x_num).squeeze(1)
    return criterion(pred, y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def predict(model, loader):
    model.eval()
    preds = [model(x_cat, x_num).squeeze(1) for x_cat, x_num, _ in loader]
    return torch.cat(preds).numpy()


def evaluate(model, loader, enc):
    y = loader.dataset.y.numpy()
    p = predict(model, loader)
    mse_scaled = float(np.mean((p - y) ** 2))
    r2 = 1.0 - mse_scaled / float(np.var(y))
    cost_true, cost_pred = enc.to_cost(y), enc.to_cost(p)
    mae = float(np.mean(np.abs(cost_true - cost_pred)))
    return mse_scaled, r2, mae


def make_target():
    torch.manual_seed(SEED)
    train_ds, _, enc, _ = build_data()
    loader = make_loader(train_ds, train=True)
    data = []
    for batch in loader:
        data.append(batch)
        if len(data) == 6:
            break
    model = SeverityNet(enc.cardinalities, len(NUM_COLS))
    return {"model": model, "data": data, "loss_fn": loss_fn,
            "make_optimizer": make_optimizer, "task": "regression"}


def main():
    torch.manual_seed(SEED)
    train_ds, val_ds, enc, val_df = build_data()
    train_loader, val_loader = make_loader(train_ds, True), make_loader(val_ds, False)
    print(f"claims: train={len(train_ds)} val={len(val_ds)} | "
          f"median cost (val)={val_df[TARGET].median():.0f}")
    model = SeverityNet(enc.cardinalities, len(NUM_COLS))
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)

    step, t0 = 0, time.time()
    for epoch in range(EPOCHS):
        model.train()
        window = []
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            window.append(loss.item())
            if step % LOG_EVERY == 0:
                print(f"[epoch {epoch + 1:2d} | step {step:5d}/{EPOCHS * steps_per_epoch}] "
                      f"train_mse {np.mean(window):.4f} | lr {scheduler.get_last_lr()[0]:.2e} | "
                      f"{(time.time() - t0) * 1000 / LOG_EVERY:.1f} ms/step")
                window, t0 = [], time.time()
        scheduler.step()
        val_mse, val_r2, val_mae = evaluate(model, val_loader, enc)
        print(f"== epoch {epoch + 1:2d} done | val_mse {val_mse:.4f} | val_r2 {val_r2:.4f} | "
              f"val_mae {val_mae:,.0f}")
    print("training complete")


if __name__ == "__main__":
    main()

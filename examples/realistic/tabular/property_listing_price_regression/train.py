"""Listing price model: listings joined with neighbourhood reference data -> MLP on log(price).

Lightning-style progress output (we moved off Lightning, kept the log format for the dashboards).
"""
import os
import sys
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import make_data

torch.set_num_threads(1)

ROOT = os.path.dirname(os.path.abspath(__file__))
SEED = 2024
BATCH_SIZE = 128
MAX_EPOCHS = 15
LR = 3e-3
WEIGHT_DECAY = 1e-2
DROPOUT = 0.3

CAT_COLS = ["property_type", "condition", "heating", "neighbourhood_code"]
NUM_COLS = ["log_floor_area", "bedrooms", "bathrooms", "building_age", "has_garden",
            "log_median_income", "crime_index", "school_rating", "log_dist_centre"]


def read_tables(root=ROOT):
    if not os.path.exists(os.path.join(root, "listings.csv")):
        make_data.generate(out_dir=root)
    listings = pd.read_csv(os.path.join(root, "listings.csv"))
    neighbourhoods = pd.read_csv(os.path.join(root, "neighbourhoods.csv"))
    return listings, neighbourhoods


def feature_frame(listings, neighbourhoods):
    df = listings.merge(neighbourhoods, on="neighbourhood_code", how="left", validate="many_to_one")
    df["log_floor_area"] = np.log(df["floor_area_m2"])
    df["building_age"] = 2024 - df["year_built"]
    df["log_median_income"] = np.log(df["median_income"])
    df["log_dist_centre"] = np.log1p(df["dist_city_centre_km"])
    df["log_price"] = np.log(df["sale_price"])
    return df


def holdout_split(df, val_frac=0.2, seed=SEED):
    perm = np.random.default_rng(seed).permutation(len(df))
    cut = int(len(df) * (1 - val_frac))
    return df.iloc[perm[:cut]].reset_index(drop=True), df.iloc[perm[cut:]].reset_index(drop=True)


class Preprocessor:
    def fit(self, df):
        self.num_mean = df[NUM_COLS].mean()
        self.num_std = df[NUM_COLS].std().replace(0, 1.0)
        self.y_mean = df["log_price"].mean()
        self.y_std = df["log_price"].std()
        self.categories = {c: sorted(df[c].unique()) for c in CAT_COLS}
        return self

    def transform(self, df):
        num = ((df[NUM_COLS] - self.num_mean) / self.num_std).to_numpy(np.float32)
        onehots = []
        for c in CAT_COLS:
            cats = pd.Categorical(df[c], categories=self.categories[c])
            onehots.append(pd.get_dummies(cats).to_numpy(np.float32))
        x = np.concatenate([num] + onehots, axis=1)
        y = ((df["log_price"] - self.y_mean) / self.y_std).to_numpy(np.float32)
        return torch.from_numpy(x), torch.from_numpy(y)


def setup_data():
    listings, neighbourhoods = read_tables()
    df = feature_frame(listings, neighbourhoods)
    train_df, val_df = holdout_split(df)
    prep = Preprocessor().fit(train_df)
    train_ds = TensorDataset(*prep.transform(train_df))
    val_ds = TensorDataset(*prep.transform(val_df))
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True,
                          generator=torch.Generator().manual_seed(SEED))
    val_dl = DataLoader(val_ds, batch_size=512)
    return train_dl, val_dl, prep


class PriceRegressor(nn.Module):
    def __init__(self, n_in, hidden=128, dropout=DROPOUT):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Dropout(dropout),
        )
        self.head = nn.Linear(hidden // 2, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


mse = nn.MSELoss()


def training_step(model, batch):
    x, y = batch
    return mse(model(x), y)


def configure_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def validation_epoch(model, val_dl, prep):
    model.eval()
    sq, n, ape = 0.0, 0, 0.0
    for x, y in val_dl:
        pred = model(x)
        sq += ((pred - y) ** 2).sum().item()
        n += len(y)
        price_pred = torch.exp(pred * prep.y_std + prep.y_mean)
        price_true = torch.exp(y * prep.y_std + prep.y_mean)
        ape += ((price_pred - price_true).abs() / price_true).sum().item()
    model.train()
    val_loss = sq / n
    return val_loss, np.sqrt(val_loss) * prep.y_std, 100 * ape / n


def make_target():
    train_dl, _, _ = setup_data()
    it = iter(train_dl)
    batches = [next(it) for _ in range(5)]
    torch.manual_seed(SEED)
    model = PriceRegressor(batches[0][0].shape[1])
    return {"model": model, "data": batches, "loss_fn": training_step,
            "make_optimizer": configure_optimizer, "task": "regression"}


def main():
    train_dl, val_dl, prep = setup_data()
    torch.manual_seed(SEED)
    model = PriceRegressor(train_dl.dataset.tensors[0].shape[1])
    optimizer = configure_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2)
    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name | Type           | Params")
    print("------------------------------------------")
    print(f"0 | body | Sequential     | {sum(p.numel() for p in model.body.parameters()):,}")
    print(f"1 | head | Linear         | {sum(p.numel() for p in model.head.parameters()):,}")
    print("------------------------------------------")
    print(f"{n_params:,}    Trainable params")
    print(f"train_size={len(train_dl.dataset)}  val_size={len(val_dl.dataset)}  "
          f"target=log(sale_price) std={prep.y_std:.4f}")

    model.train()
    n_batches = len(train_dl)
    for epoch in range(MAX_EPOCHS):
        t0 = time.time()
        total, count = 0.0, 0
        for batch in train_dl:
            loss = training_step(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch[1])
            count += len(batch[1])
        train_loss = total / count
        val_loss, val_rmse_log, val_mape = validation_epoch(model, val_dl, prep)
        scheduler.step(val_loss)
        elapsed = time.time() - t0
        print(f"Epoch {epoch}: 100%|##########| {n_batches}/{n_batches} [00:{elapsed:02.0f}<00:00, "
              f"{n_batches / elapsed:.2f}it/s, v_num=0, train_loss={train_loss:.4f}, val_loss={val_loss:.4f}, "
              f"val_rmse_log={val_rmse_log:.4f}, val_mape={val_mape:.2f}%, lr={optimizer.param_groups[0]['lr']:.1e}]")
    print(f"`Trainer.fit` stopped: `max_epochs={MAX_EPOCHS}` reached.")


if __name__ == "__main__":
    main()

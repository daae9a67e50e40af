"""Monthly rent regression from scraped apartment listings.

Tabular MLP: numeric features (median-imputed, standardised) + one-hot
categoricals -> log(rent). Keras-style progress log.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

SEED = 7
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CSV_PATH = os.path.join(DATA_DIR, "listings.csv")
N_LISTINGS = 14000

NUM_COLS = ["sqft", "bedrooms", "bathrooms", "floor", "building_year", "dist_center_km", "days_on_market"]
CAT_COLS = ["neighborhood", "energy_rating", "heating"]
BIN_COLS = ["has_parking", "pets_allowed", "furnished", "has_elevator"]
TARGET = "monthly_rent"

BATCH_SIZE = 128
EPOCHS = 30
LR = 2e-3
WEIGHT_DECAY = 1e-4
VAL_FRAC = 0.2


# ----------------------------------------------------------------------------
# synthetic scrape (stands in for the crawler export)
# ----------------------------------------------------------------------------
def write_listings_csv(path, n=N_LISTINGS, seed=SEED):
    rng = np.random.default_rng(seed)
    hoods = ["Riverside", "Old Town", "Harbor", "Midtown", "Eastgate", "Hillcrest", "Northfield",
             "Westbrook", "Lakeview", "Southpark", "University", "Ironworks", "Greenway", "Canal", "Airport"]
    hood_premium = dict(zip(hoods, rng.normal(0.0, 0.18, len(hoods))))
    hood_dist = dict(zip(hoods, rng.uniform(0.5, 14.0, len(hoods))))

    hood = rng.choice(hoods, size=n, p=rng.dirichlet(np.full(len(hoods), 4.0)))
    sqft = np.clip(rng.lognormal(np.log(980), 0.42, n), 320, 4200).round(-1)
    bedrooms = np.clip(np.round(sqft / 520 + rng.normal(0, 0.9, n)), 0, 5)
    bathrooms = np.clip(np.round(1 + (sqft - 700) / 900 + rng.normal(0, 0.5, n)), 1, 4)
    floor = np.clip(rng.geometric(0.22, n) - 1, 0, 30)
    year = np.clip(rng.normal(1978, 28, n), 1890, 2023).round()
    dist = np.clip(np.array([hood_dist[h] for h in hood]) + rng.normal(0, 1.5, n), 0.2, None).round(2)
    dom = rng.gamma(1.6, 14, n).round()
    parking = rng.random(n) < 0.35 + 0.03 * np.minimum(dist, 10)
    pets = rng.random(n) < 0.45
    furnished = rng.random(n) < 0.18
    elevator = (floor >= 4) | (rng.random(n) < 0.2)
    energy = rng.choice(list("ABCDEFG"), size=n, p=[0.05, 0.12, 0.22, 0.25, 0.18, 0.12, 0.06])
    heating = rng.choice(["gas", "electric", "district", "heat_pump", "oil"], size=n,
                         p=[0.38, 0.24, 0.2, 0.12, 0.06])

    log_rent = (
        7.55
        + 0.78 * np.log(sqft / 900)
        + np.array([hood_premium[h] for h in hood])
        - 0.028 * dist
        + 0.035 * bathrooms
        + 0.012 * np.minimum(floor, 12)
        + 0.0012 * (year - 1978)
        + 0.07 * parking + 0.03 * pets + 0.11 * furnished + 0.04 * elevator
        - 0.025 * (np.array([ord(e) for e in energy]) - ord("D"))
        + np.where(heating == "heat_pump", 0.04, 0.0)
        - 0.0015 * dom
        + rng.normal(0, 0.07, n)
    )
    rent = np.round(np.exp(log_rent), -1)

    df = pd.DataFrame({
        "listing_id": np.arange(100000, 100000 + n),
        "neighborhood": hood,
        "sqft": [f"{int(v):,}" for v in sqft],
        "bedrooms": bedrooms.astype(int),
        "bathrooms": bathrooms.astype(int),
        "floor": floor.astype(int),
        "building_year": year,
        "dist_center_km": dist,
        "days_on_market": dom.astype(int),
        "has_parking": np.where(parking, "Y", "N"),
        "pets_allowed": np.where(pets, "Y", "N"),
        "furnished": np.where(furnished, "Y", "N"),
        "has_elevator": np.where(elevator, "Y", "N"),
        "energy_rating": energy,
        "heating": heating,
        TARGET: rent,
    })
    # scraper gaps
    for col, frac in [("sqft", 0.04), ("building_year", 0.11), ("energy_rating", 0.09), ("heating", 0.03)]:
        miss = rng.random(n) < frac
        df[col] = df[col].astype(object)
        df.loc[miss, col] = np.nan
    df.loc[rng.random(n) < 0.01, "sqft"] = "n/a"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    df.to_csv(path, index=False)


# ----------------------------------------------------------------------------
# preprocessing
# ----------------------------------------------------------------------------
def load_listings(path):
    df = pd.read_csv(path)
    for c in NUM_COLS:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    for c in BIN_COLS:
        df[c] = (df[c] == "Y").astype(np.float32)
    for c in CAT_COLS:
        df[c] = df[c].fillna("missing").astype(str)
    df = df.dropna(subset=[TARGET]).reset_index(drop=True)
    return df


def split_frame(df, val_frac=VAL_FRAC, seed=SEED):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(df))
    n_val = int(len(df) * val_frac)
    return df.iloc[idx[n_val:]].reset_index(drop=True), df.iloc[idx[:n_val]].reset_index(drop=True)


class TabularPreprocessor:
    def fit(self, df):
        self.medians = df[NUM_COLS].median()
        num = df[NUM_COLS].fillna(self.medians)
        self.mean = num.mean()
        self.std = num.std().replace(0, 1.0)
        self.categories = {c: sorted(df[c].unique()) for c in CAT_COLS}
        self.y_mean = float(np.log(df[TARGET]).mean())
        self.y_std = float(np.log(df[TARGET]).std())
        return self

    def transform(self, df):
        num = (df[NUM_COLS].fillna(self.medians) - self.mean) / self.std
        parts = [num.astype(np.float32), df[BIN_COLS].astype(np.float32)]
        for c in CAT_COLS:
            cat = pd.Categorical(df[c], categories=self.categories[c])
            parts.append(pd.get_dummies(cat, prefix=c, dtype=np.float32).set_index(df.index))
        X = pd.concat(parts, axis=1).to_numpy(np.float32)
        y = ((np.log(df[TARGET]) - self.y_mean) / self.y_std).to_numpy(np.float32)
        return X, y


def build_datasets():
    if not os.path.exists(CSV_PATH):
        write_listings_csv(CSV_PATH)
    df = load_listings(CSV_PATH)
    train_df, val_df = split_frame(df)
    prep = TabularPreprocessor().fit(train_df)
    X_tr, y_tr = prep.transform(train_df)
    X_va, y_va = prep.transform(val_df)
    train_ds = TensorDataset(torch.from_numpy(X_tr), torch.from_numpy(y_tr))
    val_ds = TensorDataset(torch.from_numpy(X_va), torch.from_numpy(y_va))
    return train_ds, val_ds, prep


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class RentMLP(nn.Module):
    def __init__(self, n_in, hidden=(256, 128, 64), dropout=0.1):
        super().__init__()
        layers, d = [], n_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


def compute_loss(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, prep = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=1024)
    model = RentMLP(train_ds.tensors[0].shape[1])
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, loader, prep):
    model.eval()
    se, ae_usd, n = 0.0, 0.0, 0
    for x, y in loader:
        pred = model(x)
        se += nn.functional.mse_loss(pred, y, reduction="sum").item()
        rent_pred = torch.exp(pred * prep.y_std + prep.y_mean)
        rent_true = torch.exp(y * prep.y_std + prep.y_mean)
        ae_usd += (rent_pred - rent_true).abs().sum().item()
        n += len(y)
    model.train()
    return se / n, ae_usd / n


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_ds, val_ds, prep = build_datasets()
    print(f"train rows: {len(train_ds)}, val rows: {len(val_ds)}, features: {train_ds.tensors[0].shape[1]}")
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=1024)

    model = RentMLP(train_ds.tensors[0].shape[1])
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * len(train_loader))

    steps = len(train_loader)
    t_start = time.time()
    for epoch in range(1, EPOCHS + 1):
        print(f"Epoch {epoch}/{EPOCHS}")
        t0 = time.time()
        model.train()
        running, seen = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad(set_to_none=True)
            loss = compute_loss(model, batch)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item() * len(batch[1])
            seen += len(batch[1])
        val_loss, val_mae = evaluate(model, val_loader, prep)
        dt = time.time() - t0
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {running / seen:.4f} - val_loss: {val_loss:.4f} - val_mae_usd: {val_mae:.2f}"
              f" - lr: {scheduler.get_last_lr()[0]:.2e}")
    print(f"Training finished in {time.time() - t_start:.1f}s. final val_loss={val_loss:.4f} val_mae_usd={val_mae:.2f}")


if __name__ == "__main__":
    main()

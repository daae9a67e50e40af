"""House sale price regression.

MLP over standardized numeric features + a learned neighborhood embedding.
Target is log(price), standardized with train statistics; metrics are reported
back in dollars.

    data/sales.csv          sale_id, property_id, sale_date, price
    data/properties.csv     property_id, neighborhood, sqft, bedrooms, ...
    data/neighborhoods.csv  neighborhood, median_income, school_rating, crime_index
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

torch.set_num_threads(1)

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SEED = 1234
BATCH_SIZE = 128
EPOCHS = 60
LR = 3e-3
WEIGHT_DECAY = 1e-4
LR_STEP_EPOCHS = 20   # halve the learning rate every 20 epochs
LR_GAMMA = 0.5
VAL_FRAC = 0.2

NUMERIC_COLS = [
    "log_sqft", "bedrooms", "bathrooms", "age_at_sale", "log_lot_size", "garage_spaces",
    "condition", "sale_year", "sale_month_sin", "sale_month_cos",
    "nbhd_median_income", "nbhd_school_rating", "nbhd_crime_index",
]


# ----------------------------------------------------------------------------
# synthetic raw tables
# ----------------------------------------------------------------------------
def generate_csvs(n_props=5200, n_sales=6000, n_nbhd=40, seed=SEED):
    rng = np.random.default_rng(seed)
    os.makedirs(DATA_DIR, exist_ok=True)

    nb_names = [f"NB{i:02d}" for i in range(n_nbhd)]
    nb = pd.DataFrame({
        "neighborhood": nb_names,
        "median_income": np.round(rng.lognormal(11.0, 0.3, n_nbhd), -2),
        "school_rating": np.round(rng.uniform(3, 10, n_nbhd), 1),
        "crime_index": np.round(rng.gamma(4, 12, n_nbhd), 1),
    })
    nb_latent = rng.normal(0, 0.15, n_nbhd)  # location premium not captured by the stats

    sqft = np.round(np.exp(rng.normal(7.45, 0.35, n_props)), -1)
    beds = np.clip(np.round(sqft / 600 + rng.normal(0, 0.7, n_props)), 1, 7).astype(int)
    baths = np.clip(np.round(beds * 0.6 + rng.normal(0, 0.5, n_props)) / 1.0, 1, 5)
    props = pd.DataFrame({
        "property_id": np.arange(50000, 50000 + n_props),
        "neighborhood": rng.choice(nb_names, n_props),
        "sqft": sqft,
        "bedrooms": beds,
        "bathrooms": baths,
        "year_built": rng.integers(1920, 2022, n_props),
        "lot_size": np.round(np.exp(rng.normal(8.8, 0.5, n_props)), -1),
        "garage_spaces": rng.choice([0, 1, 2, 3], n_props, p=[0.2, 0.35, 0.38, 0.07]),
        "condition": rng.integers(1, 6, n_props),
    })

    sales = pd.DataFrame({
        "sale_id": np.arange(n_sales),
        "property_id": rng.choice(props.property_id.values, n_sales),
        "sale_date": pd.to_datetime("2016-01-01") + pd.to_timedelta(rng.integers(0, 365 * 8, n_sales), unit="D"),
    })
    t = sales.merge(props, on="property_id").merge(nb, on="neighborhood")
    age = t.sale_date.dt.year - t.year_built
    nb_idx = t.neighborhood.str[2:].astype(int).values
    logp = (
        12.4 + 0.75 * (np.log(t.sqft) - 7.45) + 0.04 * t.bathrooms
        - 0.004 * age + 0.00004 * age ** 2 * (age > 60)
        + 0.12 * np.log(t.lot_size / 6600) + 0.05 * t.garage_spaces
        + 0.07 * (t.condition - 3) + 0.1 * np.tanh((t.condition - 3) * (np.log(t.sqft) - 7.45) * 2)
        + 0.45 * np.log(t.median_income / 60000) + 0.05 * (t.school_rating - 6.5)
        - 0.004 * (t.crime_index - 48) + nb_latent[nb_idx]
        + 0.045 * (t.sale_date.dt.year - 2016) + 0.03 * np.sin(2 * np.pi * (t.sale_date.dt.month - 3) / 12)
        + rng.normal(0, 0.06, len(t))
    )
    t["price"] = np.round(np.exp(logp), -2)
    sales = sales.merge(t[["sale_id", "price"]], on="sale_id")
    sales["sale_date"] = sales.sale_date.dt.strftime("%Y-%m-%d")

    nb.to_csv(os.path.join(DATA_DIR, "neighborhoods.csv"), index=False)
    props.to_csv(os.path.join(DATA_DIR, "properties.csv"), index=False)
    sales.to_csv(os.path.join(DATA_DIR, "sales.csv"), index=False)


# ----------------------------------------------------------------------------
# preprocessing
# ----------------------------------------------------------------------------
def load_frame():
    if not os.path.exists(os.path.join(DATA_DIR, "sales.csv")):
        generate_csvs()
    sales = pd.read_csv(os.path.join(DATA_DIR, "sales.csv"), parse_dates=["sale_date"])
    props = pd.read_csv(os.path.join(DATA_DIR, "properties.csv"))
    nb = pd.read_csv(os.path.join(DATA_DIR, "neighborhoods.csv"))
    nb = nb.rename(columns={"median_income": "nbhd_median_income", "school_rating": "nbhd_school_rating",
                            "crime_index": "nbhd_crime_index"})

    df = sales.merge(props, on="property_id", how="left", validate="many_to_one")
    df = df.merge(nb, on="neighborhood", how="left", validate="many_to_one")

    df["log_sqft"] = np.log(df["sqft"])
    df["log_lot_size"] = np.log(df["lot_size"])
    df["sale_year"] = df["sale_date"].dt.year
    df["age_at_sale"] = df["sale_year"] - df["year_built"]
    month = df["sale_date"].dt.month
    df["sale_month_sin"] = np.sin(2 * np.pi * month / 12)
    df["sale_month_cos"] = np.cos(2 * np.pi * month / 12)
    df["log_price"] = np.log(df["price"])
    return df.sort_values("sale_id").reset_index(drop=True)


def split(df, val_frac=VAL_FRAC, seed=SEED):
    # group by property so repeat sales of a house don't straddle the split
    rng = np.random.default_rng(seed)
    pids = df["property_id"].unique()
    rng.shuffle(pids)
    val_ids = set(pids[: int(len(pids) * val_frac)])
    m = df["property_id"].isin(val_ids)
    return df[~m].reset_index(drop=True), df[m].reset_index(drop=True)


class Preprocessor:
    def fit(self, df):
        self.mu = df[NUMERIC_COLS].mean()
        self.sigma = df[NUMERIC_COLS].std().replace(0, 1.0)
        self.nb_vocab = {n: i + 1 for i, n in enumerate(sorted(df["neighborhood"].unique()))}  # 0 = unknown
        self.y_mu = df["log_price"].mean()
        self.y_sigma = df["log_price"].std()
        return self

    def transform(self, df):
        x_num = ((df[NUMERIC_COLS] - self.mu) / self.sigma).to_numpy(dtype=np.float32, copy=True)
        x_nb = df["neighborhood"].map(self.nb_vocab).fillna(0).to_numpy(dtype=np.int64, copy=True)
        y = ((df["log_price"] - self.y_mu) / self.y_sigma).to_numpy(dtype=np.float32, copy=True)
        return torch.from_numpy(x_num), torch.from_numpy(x_nb), torch.from_numpy(y)


def build_datasets():
    df = load_frame()
    tr, va = split(df)
    pre = Preprocessor().fit(tr)
    return pre.transform(tr), pre.transform(va), pre


def iterate_batches(tensors, batch_size, shuffle, generator=None):
    n = tensors[0].shape[0]
    idx = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for i in range(0, n, batch_size):
        b = idx[i:i + batch_size]
        yield tuple(t[b] for t in tensors)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class PriceMLP(nn.Module):
    def __init__(self, n_numeric, n_nbhd, emb_dim=8, hidden=128):
        super().__init__()
        self.nb_emb = nn.Embedding(n_nbhd + 1, emb_dim)
        self.mlp = nn.Sequential(
            nn.Linear(n_numeric + emb_dim, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x_num, x_nb):
        h = torch.cat([x_num, self.nb_emb(x_nb)], dim=-1)
        return self.mlp(h).squeeze(-1)


def loss_fn(model, batch):
    x_num, x_nb, y = batch
    return nn.functional.mse_loss(model(x_num, x_nb), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_scheduler(opt):
    return torch.optim.lr_scheduler.StepLR(opt, step_size=LR_STEP_EPOCHS, gamma=LR_GAMMA)


@torch.no_grad()
def evaluate(model, data, pre):
    model.eval()
    preds = torch.cat([model(xn, xb) for xn, xb, _ in iterate_batches(data, 1024, shuffle=False)])
    model.train()
    y = data[2]
    mse = nn.functional.mse_loss(preds, y).item()
    price_pred = np.exp(preds.numpy() * pre.y_sigma + pre.y_mu)
    price_true = np.exp(y.numpy() * pre.y_sigma + pre.y_mu)
    rmse = float(np.sqrt(np.mean((price_pred - price_true) ** 2)))
    mape = float(np.mean(np.abs(price_pred - price_true) / price_true)) * 100
    return mse, rmse, mape


def make_target():
    torch.manual_seed(SEED)
    train_data, _, pre = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(6), iterate_batches(train_data, BATCH_SIZE, shuffle=True, generator=g))]
    return {
        "model": PriceMLP(len(NUMERIC_COLS), len(pre.nb_vocab)),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    train_data, val_data, pre = build_datasets()
    n_tr, n_va = len(train_data[2]), len(val_data[2])
    print(f"loaded {n_tr} train / {n_va} val sales, {len(NUMERIC_COLS)} numeric features, "
          f"{len(pre.nb_vocab)} neighborhoods")
    model = PriceMLP(len(NUMERIC_COLS), len(pre.nb_vocab))
    print(f"model params: {sum(p.numel() for p in model.parameters()):,}")
    opt = make_optimizer(model.parameters())
    sched = make_scheduler(opt)
    g = torch.Generator().manual_seed(SEED)

    best_rmse = float("inf")
    t_start = time.time()
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        tot, n = 0.0, 0
        for batch in iterate_batches(train_data, BATCH_SIZE, shuffle=True, generator=g):
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item() * len(batch[2])
            n += len(batch[2])
        val_mse, val_rmse, val_mape = evaluate(model, val_data, pre)
        best_rmse = min(best_rmse, val_rmse)
        if epoch == 1 or epoch % 3 == 0 or epoch == EPOCHS:
            print(f"epoch {epoch:3d} | train_mse {tot / n:.4f} | val_mse {val_mse:.4f} | "
                  f"val_rmse ${val_rmse:,.0f} | val_mape {val_mape:.2f}% | {1000 * (time.time() - t0):.0f}ms")
    print(f"done in {time.time() - t_start:.1f}s, best val_rmse ${best_rmse:,.0f}")


if __name__ == "__main__":
    main()

"""Telecom churn model: customer + usage tables -> entity-embedding MLP.

Data comes from two CSV exports (customers.csv, usage.csv) joined on
customer_id. Categorical columns get learned embeddings, numeric columns are
standardised with train-split statistics.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")

SEED = 7
BATCH_SIZE = 256
EPOCHS = 15
LR = 3e-3
WEIGHT_DECAY = 1e-5
LR_STEP_EPOCHS = 5     # halve the LR every 5 epochs
LR_GAMMA = 0.5

CAT_COLS = ["plan", "region", "payment_method", "contract"]
NUM_COLS = ["tenure_months", "monthly_charges", "support_calls", "age",
            "avg_daily_minutes", "data_gb", "n_devices", "late_payments"]
TARGET = "churned"


# --------------------------------------------------------------------------
# synthetic export generator (stands in for the warehouse dump)
# --------------------------------------------------------------------------
def generate_csvs(n_customers=20000, seed=0):
    rng = np.random.default_rng(seed)
    os.makedirs(DATA_DIR, exist_ok=True)
    ids = rng.permutation(np.arange(100000, 100000 + n_customers))

    plans = np.array(["basic", "standard", "plus", "premium", "family"])
    regions = np.array(["north", "south", "east", "west", "central", "coastal", "metro", "rural"])
    payments = np.array(["card", "bank_transfer", "e_check", "mailed_check"])
    contracts = np.array(["month_to_month", "one_year", "two_year"])

    plan = rng.choice(plans, n_customers, p=[0.3, 0.3, 0.2, 0.1, 0.1])
    region = rng.choice(regions, n_customers)
    payment = rng.choice(payments, n_customers, p=[0.4, 0.25, 0.25, 0.1])
    contract = rng.choice(contracts, n_customers, p=[0.55, 0.25, 0.2])
    tenure = np.clip(rng.gamma(2.0, 14.0, n_customers), 1, 96).round()
    base_price = pd.Series(plan).map({"basic": 25, "standard": 45, "plus": 65,
                                      "premium": 95, "family": 110}).to_numpy()
    monthly = (base_price + rng.normal(0, 8, n_customers)).round(2)
    calls = rng.poisson(1.2, n_customers)
    age = np.clip(rng.normal(44, 14, n_customers), 18, 90).round()
    minutes = np.clip(rng.lognormal(4.0, 0.6, n_customers), 1, None).round(1)
    data_gb = np.clip(rng.lognormal(1.5, 0.8, n_customers), 0.1, None).round(2)
    devices = rng.integers(1, 6, n_customers)
    late = rng.poisson(0.6, n_customers)

    contract_eff = pd.Series(contract).map({"month_to_month": 1.2, "one_year": -0.4,
                                            "two_year": -1.5}).to_numpy()
    pay_eff = pd.Series(payment).map({"card": -0.3, "bank_transfer": -0.3,
                                      "e_check": 0.7, "mailed_check": 0.1}).to_numpy()
    region_eff = pd.Series(region).map(dict(zip(regions, rng.normal(0, 0.4, len(regions))))).to_numpy()
    logit = (-0.9 + contract_eff + pay_eff + region_eff
             - 1.1 * np.log1p(tenure / 12.0)
             + 0.45 * np.maximum(calls - 1, 0) ** 1.2
             + 0.02 * (monthly - 60) * (contract == "month_to_month")
             + 0.6 * np.tanh((late - 1.0))
             - 0.4 * np.log1p(minutes / 60.0) * (devices >= 3)
             + 0.5 * ((age < 28) & (data_gb > 6)))
    churned = (rng.random(n_customers) < 1 / (1 + np.exp(-logit))).astype(int)

    customers = pd.DataFrame({"customer_id": ids, "plan": plan, "region": region,
                              "payment_method": payment, "contract": contract,
                              "tenure_months": tenure, "monthly_charges": monthly,
                              "support_calls": calls, "age": age,
                              "late_payments": late, "churned": churned})
    usage = pd.DataFrame({"customer_id": ids, "avg_daily_minutes": minutes,
                          "data_gb": data_gb, "n_devices": devices})
    usage = usage.sample(frac=1.0, random_state=1)  # different row order, as exported
    customers.to_csv(os.path.join(DATA_DIR, "customers.csv"), index=False)
    usage.to_csv(os.path.join(DATA_DIR, "usage.csv"), index=False)


# --------------------------------------------------------------------------
# preprocessing
# --------------------------------------------------------------------------
def load_frame():
    if not os.path.exists(os.path.join(DATA_DIR, "customers.csv")):
        generate_csvs()
    customers = pd.read_csv(os.path.join(DATA_DIR, "customers.csv"))
    usage = pd.read_csv(os.path.join(DATA_DIR, "usage.csv"))
    df = customers.merge(usage, on="customer_id", how="inner", validate="one_to_one")
    return df


def split_frame(df, val_frac=0.2, seed=SEED):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(df))
    n_val = int(len(df) * val_frac)
    return df.iloc[idx[n_val:]].reset_index(drop=True), df.iloc[idx[:n_val]].reset_index(drop=True)


class Preprocessor:
    """Category vocabularies + numeric standardisation, fitted on train only."""

    def fit(self, df):
        # index 0 is reserved for categories unseen at fit time
        self.vocabs = {c: {v: i + 1 for i, v in enumerate(sorted(df[c].unique()))} for c in CAT_COLS}
        num = df[NUM_COLS].astype("float64")
        num = num.assign(avg_daily_minutes=np.log1p(num.avg_daily_minutes),
                         data_gb=np.log1p(num.data_gb))
        self.mean = num.mean()
        self.std = num.std().replace(0, 1.0)
        return self

    def transform(self, df):
        cats = np.stack([df[c].map(self.vocabs[c]).fillna(0).astype(int).to_numpy()
                         for c in CAT_COLS], axis=1)
        num = df[NUM_COLS].astype("float64")
        num = num.assign(avg_daily_minutes=np.log1p(num.avg_daily_minutes),
                         data_gb=np.log1p(num.data_gb))
        num = ((num - self.mean) / self.std).to_numpy()
        y = df[TARGET].to_numpy()
        return (torch.tensor(cats, dtype=torch.long),
                torch.tensor(num, dtype=torch.float32),
                torch.tensor(y, dtype=torch.float32))

    @property
    def cardinalities(self):
        return [len(self.vocabs[c]) + 1 for c in CAT_COLS]


def build_datasets():
    df = load_frame()
    train_df, val_df = split_frame(df)
    prep = Preprocessor().fit(train_df)
    train_ds = TensorDataset(*prep.transform(train_df))
    val_ds = TensorDataset(*prep.transform(val_df))
    return train_ds, val_ds, prep


def make_loaders(train_ds, val_ds):
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=1024, shuffle=False)
    return train_loader, val_loader


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class ChurnMLP(nn.Module):
    def __init__(self, cardinalities, n_num, hidden=128, dropout=0.1):
        super().__init__()
        emb_dims = [min(16, (n + 1) // 2) for n in cardinalities]
        self.embeddings = nn.ModuleList([nn.Embedding(n, d) for n, d in zip(cardinalities, emb_dims)])
        in_dim = sum(emb_dims) + n_num
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, 1),
        )

    def forward(self, x_cat, x_num):
        embs = [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
        h = torch.cat(embs + [x_num], dim=1)
        return self.net(h).squeeze(1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x_cat, x_num, y = batch
    return criterion(model(x_cat, x_num), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return (ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    losses, scores, labels = [], [], []
    for x_cat, x_num, y in loader:
        logits = model(x_cat, x_num)
        losses.append(criterion(logits, y).item() * len(y))
        scores.append(logits.numpy())
        labels.append(y.numpy())
    scores, labels = np.concatenate(scores), np.concatenate(labels)
    acc = ((scores > 0) == labels).mean()
    return sum(losses) / len(labels), acc, roc_auc(scores, labels)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, prep = build_datasets()
    train_loader, _ = make_loaders(train_ds, val_ds)
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 5:
            break
    model = ChurnMLP(prep.cardinalities, len(NUM_COLS))
    return {"model": model, "data": data, "loss_fn": loss_fn,
            "make_optimizer": make_optimizer, "num_classes": 2, "task": "classification"}


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_ds, val_ds, prep = build_datasets()
    train_loader, val_loader = make_loaders(train_ds, val_ds)
    print(f"train rows: {len(train_ds)}  val rows: {len(val_ds)}  "
          f"churn rate (train): {train_ds.tensors[2].mean():.3f}")
    print(f"categorical cardinalities: {dict(zip(CAT_COLS, prep.cardinalities))}")

    model = ChurnMLP(prep.cardinalities, len(NUM_COLS))
    print(f"model params: {sum(p.numel() for p in model.parameters()):,}")
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=LR_STEP_EPOCHS, gamma=LR_GAMMA)

    best_auc = 0.0
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        running, seen = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item() * len(batch[2])
            seen += len(batch[2])
        val_loss, val_acc, val_auc = evaluate(model, val_loader)
        best_auc = max(best_auc, val_auc)
        print(f"Epoch {epoch}/{EPOCHS} - {time.time() - t0:.1f}s - loss: {running / seen:.4f} "
              f"- val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f} - val_auc: {val_auc:.4f}")
    print(f"best val_auc: {best_auc:.4f}")


if __name__ == "__main__":
    main()

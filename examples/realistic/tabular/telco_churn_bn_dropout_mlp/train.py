"""Telco churn prediction.

customers.csv      one row per customer (contract, tenure, billing, churned)
usage.csv          monthly usage records (many per customer) -> aggregated per customer
tickets.csv        support tickets (0..n per customer) -> counts per customer

MLP with BatchNorm + dropout, AdamW, linear warmup then cosine decay.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

torch.set_num_threads(1)

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SEED = 2024
BATCH_SIZE = 128
MAX_EPOCHS = 20
LR = 2e-3
WEIGHT_DECAY = 1e-2
WARMUP_STEPS = 100
DROPOUT = 0.4
VAL_FRAC = 0.2

NUMERIC_COLS = [
    "tenure_months", "monthly_charges", "total_charges_log", "senior", "dependents",
    "avg_data_gb", "avg_minutes", "usage_trend", "months_with_usage",
    "n_tickets", "n_tickets_90d", "n_billing_tickets", "days_since_last_ticket",
]
CATEGORICAL_COLS = ["contract", "payment_method", "internet_service"]
TARGET = "churned"


# ----------------------------------------------------------------------------
# synthetic raw tables
# ----------------------------------------------------------------------------
def generate_csvs(n=7000, seed=SEED):
    rng = np.random.default_rng(seed)
    os.makedirs(DATA_DIR, exist_ok=True)
    cid = np.array([f"C{100000 + i}" for i in range(n)])
    contract = rng.choice(["month-to-month", "one_year", "two_year"], n, p=[0.55, 0.24, 0.21])
    tenure = np.where(contract == "month-to-month", rng.integers(1, 40, n), rng.integers(6, 72, n))
    internet = rng.choice(["fiber", "dsl", "none"], n, p=[0.44, 0.34, 0.22])
    monthly = np.round(20 + 45 * (internet == "fiber") + 25 * (internet == "dsl") + rng.gamma(2, 8, n), 2)
    pay = rng.choice(["electronic_check", "mailed_check", "bank_transfer", "credit_card"], n,
                     p=[0.34, 0.22, 0.22, 0.22])
    senior = (rng.uniform(size=n) < 0.16).astype(int)
    dependents = (rng.uniform(size=n) < 0.3).astype(int)

    # monthly usage, last up to 6 months
    rows = []
    base_data = rng.gamma(2, 6, n) * (internet != "none")
    base_min = rng.gamma(3, 120, n)
    trend = rng.normal(0, 0.08, n)
    for k in range(6):
        active = tenure > k
        m = np.where(active)[0]
        rows.append(pd.DataFrame({
            "customer_id": cid[m], "month_offset": -k,
            "data_gb": np.round(np.maximum(base_data[m] * (1 - trend[m] * k) + rng.normal(0, 1, len(m)), 0), 2),
            "minutes": np.round(np.maximum(base_min[m] * (1 - trend[m] * k) + rng.normal(0, 30, len(m)), 0)),
        }))
    usage = pd.concat(rows, ignore_index=True).sample(frac=1.0, random_state=seed)

    tix_rate = 0.3 + 0.6 * (internet == "fiber") + 0.4 * rng.uniform(size=n)
    n_tix = rng.poisson(tix_rate)
    t_cid = np.repeat(cid, n_tix)
    tickets = pd.DataFrame({
        "ticket_id": np.arange(len(t_cid)),
        "customer_id": t_cid,
        "days_ago": rng.integers(0, 365, len(t_cid)),
        "category": rng.choice(["billing", "technical", "account", "other"], len(t_cid), p=[0.35, 0.4, 0.15, 0.1]),
    })

    # churn outcome: noisy, with a hard ceiling on how predictable it is
    tmp = pd.DataFrame({"customer_id": cid})
    tix_recent = tickets[tickets.days_ago < 90].groupby("customer_id").size()
    billing = tickets[tickets.category == "billing"].groupby("customer_id").size()
    tmp["recent"] = tmp.customer_id.map(tix_recent).fillna(0).values
    tmp["billing"] = tmp.customer_id.map(billing).fillna(0).values
    logit = (-1.6 + 1.3 * (contract == "month-to-month") - 0.9 * (contract == "two_year")
             - 0.035 * (tenure - 24) + 0.018 * (monthly - 65) + 0.45 * (pay == "electronic_check")
             + 0.35 * (internet == "fiber") + 0.3 * senior - 0.25 * dependents
             + 0.55 * tmp.recent.values + 0.3 * tmp.billing.values + 4.0 * trend)
    churned = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(int)

    customers = pd.DataFrame({
        "customer_id": cid, "contract": contract, "tenure_months": tenure, "internet_service": internet,
        "monthly_charges": monthly, "total_charges": np.round(monthly * tenure * rng.uniform(0.95, 1.02, n), 2),
        "payment_method": pay, "senior": senior, "dependents": dependents, "churned": churned,
    })
    customers.to_csv(os.path.join(DATA_DIR, "customers.csv"), index=False)
    usage.to_csv(os.path.join(DATA_DIR, "usage.csv"), index=False)
    tickets.to_csv(os.path.join(DATA_DIR, "tickets.csv"), index=False)


# ----------------------------------------------------------------------------
# preprocessing
# ----------------------------------------------------------------------------
def load_features():
    if not os.path.exists(os.path.join(DATA_DIR, "customers.csv")):
        generate_csvs()
    cust = pd.read_csv(os.path.join(DATA_DIR, "customers.csv"))
    usage = pd.read_csv(os.path.join(DATA_DIR, "usage.csv"))
    tix = pd.read_csv(os.path.join(DATA_DIR, "tickets.csv"))

    u = usage.sort_values(["customer_id", "month_offset"])
    agg = u.groupby("customer_id").agg(
        avg_data_gb=("data_gb", "mean"), avg_minutes=("minutes", "mean"),
        months_with_usage=("month_offset", "size"),
    )
    last = u[u.month_offset == 0].set_index("customer_id")["minutes"]
    first = u.groupby("customer_id")["minutes"].first()  # oldest month in window
    agg["usage_trend"] = ((last - first) / (first + 1.0)).reindex(agg.index).fillna(0.0).clip(-2, 2)

    t = tix.groupby("customer_id").agg(
        n_tickets=("ticket_id", "size"),
        n_tickets_90d=("days_ago", lambda d: int((d < 90).sum())),
        n_billing_tickets=("category", lambda c: int((c == "billing").sum())),
        days_since_last_ticket=("days_ago", "min"),
    )

    df = cust.merge(agg, on="customer_id", how="left", validate="one_to_one")
    df = df.merge(t, on="customer_id", how="left", validate="one_to_one")
    df[["n_tickets", "n_tickets_90d", "n_billing_tickets"]] = \
        df[["n_tickets", "n_tickets_90d", "n_billing_tickets"]].fillna(0)
    df["days_since_last_ticket"] = df["days_since_last_ticket"].fillna(365)
    df["total_charges_log"] = np.log1p(df["total_charges"])
    return df


def stratified_split(df, val_frac=VAL_FRAC, seed=SEED):
    rng = np.random.default_rng(seed)
    val_idx = []
    for _, grp in df.groupby(TARGET):
        idx = grp.index.to_numpy().copy()
        rng.shuffle(idx)
        val_idx.extend(idx[: int(round(len(idx) * val_frac))])
    is_val = df.index.isin(val_idx)
    return df[~is_val].reset_index(drop=True), df[is_val].reset_index(drop=True)


class TabularEncoder:
    def fit(self, df):
        self.mean = df[NUMERIC_COLS].mean()
        self.std = df[NUMERIC_COLS].std().replace(0, 1.0)
        self.levels = {c: sorted(df[c].unique()) for c in CATEGORICAL_COLS}
        return self

    def transform(self, df):
        num = ((df[NUMERIC_COLS] - self.mean) / self.std).to_numpy(dtype=np.float32)
        onehots = [
            (df[c].to_numpy()[:, None] == np.array(self.levels[c])[None, :]).astype(np.float32)
            for c in CATEGORICAL_COLS
        ]
        X = np.concatenate([num] + onehots, axis=1)
        y = df[TARGET].to_numpy(dtype=np.float32)
        return torch.tensor(X), torch.tensor(y)


def build_datasets():
    df = load_features()
    tr, va = stratified_split(df)
    enc = TabularEncoder().fit(tr)
    return enc.transform(tr), enc.transform(va)


def iterate_batches(X, y, batch_size, shuffle, generator=None, drop_last=False):
    n = X.shape[0]
    idx = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    stop = n - n % batch_size if drop_last else n
    for i in range(0, stop, batch_size):
        b = idx[i:i + batch_size]
        yield X[b], y[b]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ChurnMLP(nn.Module):
    def __init__(self, d_in, hidden=(256, 128), dropout=DROPOUT):
        super().__init__()
        layers, d = [], d_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


_criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return _criterion(model(x), y)


def make_optimizer(params):
    decay, no_decay = [], []
    for p in params:
        (decay if p.ndim >= 2 else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                              {"params": no_decay, "weight_decay": 0.0}], lr=LR)


def warmup_cosine(total_steps, warmup=WARMUP_STEPS):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        prog = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(prog, 1.0)))
    return f


def roc_auc(y, s):
    order = np.argsort(s)
    r = np.empty(len(s))
    r[order] = np.arange(1, len(s) + 1)
    npos = y.sum()
    return (r[y == 1].sum() - npos * (npos + 1) / 2) / (npos * (len(y) - npos))


@torch.no_grad()
def validate(model, X, y):
    model.eval()
    logits = torch.cat([model(xb) for xb, _ in iterate_batches(X, y, 1024, shuffle=False)])
    loss = _criterion(logits, y).item()
    acc = ((logits > 0).float() == y).float().mean().item()
    return loss, acc, roc_auc(y.numpy(), logits.numpy())


def make_target():
    torch.manual_seed(SEED)
    (X_tr, y_tr), _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(6), iterate_batches(X_tr, y_tr, BATCH_SIZE, True, g, drop_last=True))]
    return {
        "model": ChurnMLP(X_tr.shape[1]),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    (X_tr, y_tr), (X_va, y_va) = build_datasets()
    model = ChurnMLP(X_tr.shape[1])
    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name | Type     | Params")
    print("-------------------------------")
    print(f"0 | net  | ChurnMLP | {n_params / 1000:.1f} K")
    print("-------------------------------")
    print(f"train={len(y_tr)} val={len(y_va)} features={X_tr.shape[1]} "
          f"pos_rate(train)={y_tr.mean():.3f} pos_rate(val)={y_va.mean():.3f}")

    opt = make_optimizer(list(model.parameters()))
    steps_per_epoch = len(y_tr) // BATCH_SIZE
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(MAX_EPOCHS * steps_per_epoch))
    g = torch.Generator().manual_seed(SEED)

    va_loss, va_acc, va_auc = validate(model, X_va, y_va)
    print(f"Sanity Checking: val_loss={va_loss:.3f}, val_acc={va_acc:.3f}")
    global_step = 0
    for epoch in range(MAX_EPOCHS):
        model.train()
        t0 = time.time()
        running = []
        for xb, yb in iterate_batches(X_tr, y_tr, BATCH_SIZE, True, g, drop_last=True):
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            global_step += 1
            running.append(loss.item())
        train_loss = float(np.mean(running))
        va_loss, va_acc, va_auc = validate(model, X_va, y_va)
        it_s = steps_per_epoch / max(time.time() - t0, 1e-6)
        print(f"Epoch {epoch}: 100%|##########| {steps_per_epoch}/{steps_per_epoch} "
              f"[00:0{min(9, int(time.time() - t0))}, {it_s:.2f}it/s, v_num=0, "
              f"train_loss={train_loss:.3f}, val_loss={va_loss:.3f}, val_acc={va_acc:.3f}, val_auc={va_auc:.3f}]")
    print(f"`Trainer.fit` stopped: `max_epochs={MAX_EPOCHS}` reached.")


if __name__ == "__main__":
    main()

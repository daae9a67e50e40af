"""Loan default classifier: small MLP on joined applicant / bureau / loan tables.

Data layout (generated on first run, see generate_csvs):
    data/applicants.csv  - one row per applicant (demographics, income, employment)
    data/bureau.csv      - one row per applicant (credit bureau snapshot)
    data/loans.csv       - one row per loan, with the `defaulted` outcome
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

torch.set_num_threads(1)

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SEED = 7
BATCH_SIZE = 256
EPOCHS = 25
LR = 1e-3
WEIGHT_DECAY = 1e-5
VAL_FRAC = 0.2

NUMERIC_COLS = [
    "age", "annual_income", "employment_years", "revolving_util", "debt_to_income",
    "late_payments_2y", "open_accounts", "credit_limit", "loan_amount", "term_months",
    "loan_to_income",
]
CATEGORICAL_COLS = ["home_ownership", "region", "purpose"]
TARGET = "defaulted"


# ----------------------------------------------------------------------------
# synthetic raw tables
# ----------------------------------------------------------------------------
def generate_csvs(n_applicants=9000, n_loans=10000, seed=SEED):
    rng = np.random.default_rng(seed)
    os.makedirs(DATA_DIR, exist_ok=True)

    ids = np.arange(100000, 100000 + n_applicants)
    age = rng.integers(21, 70, n_applicants)
    emp = np.clip(rng.gamma(2.0, 3.0, n_applicants), 0, age - 18).round(1)
    income = np.round(np.exp(rng.normal(10.9, 0.45, n_applicants)) + 1500 * emp, -2)
    home = rng.choice(["RENT", "MORTGAGE", "OWN", "OTHER"], n_applicants, p=[0.45, 0.38, 0.14, 0.03])
    region = rng.choice(["NE", "MW", "S", "W", "PNW"], n_applicants, p=[0.2, 0.22, 0.33, 0.18, 0.07])
    applicants = pd.DataFrame({
        "applicant_id": ids, "age": age, "employment_years": emp, "annual_income": income,
        "home_ownership": home, "region": region,
    })

    util = np.clip(rng.beta(2.0, 3.0, n_applicants), 0, 1).round(3)
    dti = np.clip(rng.gamma(3.0, 0.07, n_applicants), 0, 1.2).round(3)
    late = rng.poisson(0.25 + 1.2 * util, n_applicants)
    open_acc = rng.poisson(6, n_applicants) + 1
    limit = np.round(income * rng.uniform(0.15, 0.6, n_applicants), -2)
    bureau = pd.DataFrame({
        "applicant_id": ids, "revolving_util": util, "debt_to_income": dti,
        "late_payments_2y": late, "open_accounts": open_acc, "credit_limit": limit,
    })
    # bureau extracts come back in whatever order the vendor sends them
    bureau = bureau.sample(frac=1.0, random_state=seed).reset_index(drop=True)

    loan_app = rng.choice(ids, n_loans, replace=True)
    purpose = rng.choice(["debt_consolidation", "credit_card", "home_improvement", "car", "medical", "small_business"],
                         n_loans, p=[0.42, 0.22, 0.12, 0.1, 0.06, 0.08])
    term = rng.choice([36, 60], n_loans, p=[0.7, 0.3])
    amount = np.round(rng.lognormal(9.3, 0.6, n_loans), -2)
    loans = pd.DataFrame({
        "loan_id": np.arange(n_loans), "applicant_id": loan_app, "purpose": purpose,
        "term_months": term, "loan_amount": amount,
    })

    # outcome model (only used to draw the label)
    tmp = loans.merge(applicants, on="applicant_id").merge(bureau, on="applicant_id")
    lti = tmp.loan_amount / tmp.annual_income
    purpose_eff = tmp.purpose.map({"debt_consolidation": 0.2, "credit_card": 0.0, "home_improvement": -0.3,
                                   "car": -0.4, "medical": 0.3, "small_business": 0.9})
    logit = (-2.6 + 3.5 * (tmp.revolving_util - 0.4) + 4.0 * (tmp.debt_to_income - 0.21)
             + 0.55 * tmp.late_payments_2y + 2.5 * (lti - 0.4) - 0.025 * (tmp.age - 40)
             - 0.06 * tmp.employment_years + 0.5 * (tmp.term_months == 60) + purpose_eff
             + 0.4 * (tmp.home_ownership == "RENT") + 3.0 * tmp.revolving_util * tmp.debt_to_income)
    p = 1 / (1 + np.exp(-logit))
    tmp["defaulted"] = (rng.uniform(size=len(tmp)) < p).astype(int)
    loans = loans.merge(tmp[["loan_id", "defaulted"]], on="loan_id")

    applicants.to_csv(os.path.join(DATA_DIR, "applicants.csv"), index=False)
    bureau.to_csv(os.path.join(DATA_DIR, "bureau.csv"), index=False)
    loans.to_csv(os.path.join(DATA_DIR, "loans.csv"), index=False)


# ----------------------------------------------------------------------------
# preprocessing
# ----------------------------------------------------------------------------
def load_joined():
    if not os.path.exists(os.path.join(DATA_DIR, "loans.csv")):
        generate_csvs()
    applicants = pd.read_csv(os.path.join(DATA_DIR, "applicants.csv"))
    bureau = pd.read_csv(os.path.join(DATA_DIR, "bureau.csv"))
    loans = pd.read_csv(os.path.join(DATA_DIR, "loans.csv"))

    df = loans.merge(applicants, on="applicant_id", how="left", validate="many_to_one")
    df = df.merge(bureau, on="applicant_id", how="left", validate="many_to_one")
    df["loan_to_income"] = df["loan_amount"] / df["annual_income"]
    df = df.sort_values("loan_id").reset_index(drop=True)
    return df


def split_by_applicant(df, val_frac=VAL_FRAC, seed=SEED):
    # keep all loans of an applicant on the same side of the split
    rng = np.random.default_rng(seed)
    apps = df["applicant_id"].unique()
    rng.shuffle(apps)
    val_apps = set(apps[: int(len(apps) * val_frac)])
    is_val = df["applicant_id"].isin(val_apps)
    return df[~is_val].reset_index(drop=True), df[is_val].reset_index(drop=True)


def fit_scaler(train_df):
    X = train_df[NUMERIC_COLS].to_numpy(dtype=np.float64)
    mean = X.mean(axis=0)
    std = X.std(axis=0) + 1e-8
    return mean, std


def encode(df, scaler, dummy_columns=None):
    mean, std = scaler
    num = (df[NUMERIC_COLS].to_numpy(dtype=np.float64) - mean) / std
    cats = pd.get_dummies(df[CATEGORICAL_COLS].astype(str), prefix=CATEGORICAL_COLS, dtype=np.float32)
    if dummy_columns is None:
        dummy_columns = list(cats.columns)
    cats = cats.reindex(columns=dummy_columns, fill_value=0.0)
    X = np.concatenate([num.astype(np.float32), cats.to_numpy(dtype=np.float32)], axis=1)
    y = df[TARGET].to_numpy(dtype=np.float32)
    return X, y, dummy_columns


def build_datasets():
    df = load_joined()
    train_df, val_df = split_by_applicant(df)
    scaler = fit_scaler(train_df)
    X_tr, y_tr, dummy_cols = encode(train_df, scaler)
    X_va, y_va, _ = encode(val_df, scaler, dummy_cols)
    return (torch.from_numpy(X_tr), torch.from_numpy(y_tr)), (torch.from_numpy(X_va), torch.from_numpy(y_va))


def iterate_batches(X, y, batch_size, shuffle, generator=None):
    n = X.shape[0]
    idx = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for i in range(0, n, batch_size):
        b = idx[i:i + batch_size]
        yield X[b], y[b]


# ----------------------------------------------------------------------------
# model / loss
# ----------------------------------------------------------------------------
class DefaultMLP(nn.Module):
    def __init__(self, in_features, hidden=128, dropout=0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


_bce = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return _bce(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def roc_auc(y_true, scores):
    y_true = np.asarray(y_true)
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = y_true.sum()
    n_neg = len(y_true) - n_pos
    return (ranks[y_true == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = torch.cat([model(xb) for xb, _ in iterate_batches(X, y, 2048, shuffle=False)])
    model.train()
    loss = _bce(logits, y).item()
    return loss, roc_auc(y.numpy(), logits.numpy())


def make_target():
    torch.manual_seed(SEED)
    (X_tr, y_tr), _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(6), iterate_batches(X_tr, y_tr, BATCH_SIZE, shuffle=True, generator=g))]
    return {
        "model": DefaultMLP(X_tr.shape[1]),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    (X_tr, y_tr), (X_va, y_va) = build_datasets()
    print(f"Train on {len(y_tr)} samples, validate on {len(y_va)} samples "
          f"({X_tr.shape[1]} features, default rate {y_tr.mean():.3f})")
    model = DefaultMLP(X_tr.shape[1])
    opt = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)
    steps_per_epoch = (len(y_tr) + BATCH_SIZE - 1) // BATCH_SIZE

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        tot, n = 0.0, 0
        for xb, yb in iterate_batches(X_tr, y_tr, BATCH_SIZE, shuffle=True, generator=g):
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        tr_loss = tot / n
        _, tr_auc = evaluate(model, X_tr, y_tr)
        va_loss, va_auc = evaluate(model, X_va, y_va)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.1f}s - loss: {tr_loss:.4f} - auc: {tr_auc:.4f} "
              f"- val_loss: {va_loss:.4f} - val_auc: {va_auc:.4f}")


if __name__ == "__main__":
    main()

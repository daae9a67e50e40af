"""Loan default model: applicant form + credit-bureau tradelines -> MLP.

Data layout (as exported by the underwriting warehouse):
  data/applicants.csv   one row per application
  data/bureau.csv       one row per bureau tradeline (0..n per applicant)
"""
import logging
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
N_APPLICANTS = 14000
BATCH_SIZE = 256
EPOCHS = 24
LR = 1e-3
WEIGHT_DECAY = 1e-4
VAL_FRAC = 0.2

CAT_COLS = ["home_ownership", "loan_purpose", "term_months"]
NUM_COLS = [
    "age", "annual_income", "employment_years", "loan_amount",
    "n_tradelines", "total_balance", "total_limit", "utilisation",
    "months_since_last_delinq",
]
IMPUTE_COLS = ["employment_years", "n_tradelines", "total_balance", "total_limit",
               "utilisation", "months_since_last_delinq"]
TARGET = "defaulted_12m"

logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                    datefmt="%H:%M:%S", level=logging.INFO)
log = logging.getLogger("default_mlp")


# ----------------------------------------------------------------------------
# synthetic export (stands in for the warehouse dump)
# ----------------------------------------------------------------------------
def write_raw_data(data_dir=DATA_DIR, n=N_APPLICANTS, seed=SEED):
    os.makedirs(data_dir, exist_ok=True)
    app_path = os.path.join(data_dir, "applicants.csv")
    bur_path = os.path.join(data_dir, "bureau.csv")
    if os.path.exists(app_path) and os.path.exists(bur_path):
        return app_path, bur_path
    rng = np.random.default_rng(seed)
    ids = rng.choice(np.arange(100000, 999999), size=n, replace=False)
    risk = rng.normal(size=n)
    age = np.clip(rng.normal(41, 12, n), 21, 75).round()
    income = np.exp(rng.normal(10.8, 0.45, n) - 0.12 * risk).round(-2)
    emp = np.clip(rng.gamma(2.0, 3.5, n) - 0.8 * risk, 0, 40).round(1)
    emp[rng.random(n) < 0.06] = np.nan
    home = rng.choice(["RENT", "MORTGAGE", "OWN"], n, p=[0.45, 0.4, 0.15])
    purpose = rng.choice(["debt_consolidation", "credit_card", "home_improvement",
                          "car", "medical", "small_business"], n,
                         p=[0.42, 0.22, 0.12, 0.1, 0.07, 0.07])
    amount = np.clip(np.exp(rng.normal(9.3, 0.6, n)), 1000, 40000).round(-2)
    term = rng.choice([36, 60], n, p=[0.7, 0.3])
    applicants = pd.DataFrame({
        "applicant_id": ids, "age": age, "annual_income": income,
        "employment_years": emp, "home_ownership": home, "loan_purpose": purpose,
        "loan_amount": amount, "term_months": term,
    })

    thin_file = rng.random(n) < 0.11 + 0.06 * (risk > 1)
    n_lines = np.where(thin_file, 0, 1 + rng.poisson(3.5, n))
    rows = []
    last_delinq = np.full(n, np.nan)
    util_true = np.zeros(n)
    for i in range(n):
        k = n_lines[i]
        if k == 0:
            continue
        limit = np.exp(rng.normal(8.4, 0.7, k)).round(-1)
        u = np.clip(rng.beta(2, 5, k) + 0.12 * risk[i], 0.0, 1.0)
        bal = (limit * u).round(2)
        p_del = 1.0 / (1.0 + np.exp(-(-2.6 + 1.1 * risk[i])))
        delinq = rng.random(k) < p_del
        msd = np.where(delinq, np.clip(rng.exponential(22, k), 1, 96).round(), np.nan)
        if delinq.any():
            last_delinq[i] = np.nanmin(msd)
        util_true[i] = bal.sum() / limit.sum()
        for j in range(k):
            rows.append((ids[i], j, limit[j], bal[j], msd[j]))
    bureau = pd.DataFrame(rows, columns=["applicant_id", "tradeline_no", "credit_limit",
                                         "balance", "months_since_delinq"])
    bureau = bureau.sample(frac=1.0, random_state=seed).reset_index(drop=True)

    dti = amount / income
    has_delinq = ~np.isnan(last_delinq)
    recency = np.where(has_delinq, np.exp(-np.nan_to_num(last_delinq, nan=96.0) / 18.0), 0.0)
    logit = (-2.9 + 1.1 * has_delinq + 2.4 * recency + 1.3 * thin_file
             + 2.2 * (util_true - 0.3) + 2.0 * dti - 0.025 * (age - 40)
             + 0.35 * (term == 60) + 0.4 * (purpose == "small_business")
             + 0.5 * risk)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    applicants[TARGET] = y
    applicants.to_csv(app_path, index=False)
    bureau.to_csv(bur_path, index=False)
    return app_path, bur_path


# ----------------------------------------------------------------------------
# feature pipeline
# ----------------------------------------------------------------------------
def aggregate_bureau(bureau):
    g = bureau.groupby("applicant_id")
    agg = pd.DataFrame({
        "n_tradelines": g.size(),
        "total_balance": g["balance"].sum(),
        "total_limit": g["credit_limit"].sum(),
        "months_since_last_delinq": g["months_since_delinq"].min(),
    })
    agg["utilisation"] = agg["total_balance"] / agg["total_limit"]
    return agg.reset_index()


def load_frame():
    app_path, bur_path = write_raw_data()
    applicants = pd.read_csv(app_path)
    bureau = pd.read_csv(bur_path)
    agg = aggregate_bureau(bureau)
    df = applicants.merge(agg, on="applicant_id", how="left", validate="one_to_one")
    return df


def stratified_split(df, frac, seed):
    rng = np.random.default_rng(seed)
    val_idx = []
    for _, grp in df.groupby(TARGET):
        idx = grp.index.to_numpy()
        val_idx.append(rng.choice(idx, size=int(round(frac * len(idx))), replace=False))
    val_idx = np.concatenate(val_idx)
    is_val = df.index.isin(val_idx)
    return df[~is_val].reset_index(drop=True), df[is_val].reset_index(drop=True)


class Preprocessor:
    def fit(self, df):
        self.medians = {c: float(df[c].median()) for c in IMPUTE_COLS}
        self.categories = {c: sorted(df[c].astype(str).unique()) for c in CAT_COLS}
        num = self._numeric(df)
        self.mean = num.mean(axis=0)
        self.std = num.std(axis=0) + 1e-6
        return self

    def _numeric(self, df):
        out = df[NUM_COLS].copy()
        for c in IMPUTE_COLS:
            out[c] = out[c].fillna(self.medians[c])
            out[c + "_missing"] = out[c].isna().astype(np.float32)
        for c in ["annual_income", "loan_amount", "total_balance", "total_limit"]:
            out[c] = np.log1p(out[c])
        return out.to_numpy(dtype=np.float32)

    def transform(self, df):
        num = (self._numeric(df) - self.mean) / self.std
        cats = []
        for c in CAT_COLS:
            cat = pd.Categorical(df[c].astype(str), categories=self.categories[c])
            cats.append(pd.get_dummies(cat).to_numpy(dtype=np.float32))
        X = np.concatenate([num] + cats, axis=1).astype(np.float32)
        y = df[TARGET].to_numpy(dtype=np.float32)
        return X, y


def build_data():
    df = load_frame()
    train_df, val_df = stratified_split(df, VAL_FRAC, SEED)
    pre = Preprocessor().fit(train_df)
    Xtr, ytr = pre.transform(train_df)
    Xva, yva = pre.transform(val_df)
    return Xtr, ytr, Xva, yva


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class DefaultMLP(nn.Module):
    def __init__(self, n_in, hidden=(128, 64), dropout=0.15):
        super().__init__()
        layers, d = [], n_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def roc_auc(y, s):
    order = np.argsort(s)
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    n_pos = y.sum()
    n_neg = len(y) - n_pos
    return (ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    losses, scores, ys = [], [], []
    for x, y in loader:
        out = model(x)
        losses.append(criterion(out, y).item() * len(y))
        scores.append(out.numpy())
        ys.append(y.numpy())
    model.train()
    y = np.concatenate(ys)
    s = np.concatenate(scores)
    return sum(losses) / len(y), roc_auc(y, s)


def make_loaders(Xtr, ytr, Xva, yva):
    g = torch.Generator().manual_seed(SEED)
    train_ds = TensorDataset(torch.from_numpy(Xtr), torch.from_numpy(ytr))
    val_ds = TensorDataset(torch.from_numpy(Xva), torch.from_numpy(yva))
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=1024, shuffle=False)
    return train_loader, val_loader


def make_target():
    torch.manual_seed(SEED)
    Xtr, ytr, Xva, yva = build_data()
    train_loader, val_loader = make_loaders(Xtr, ytr, Xva, yva)
    model = DefaultMLP(Xtr.shape[1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    return {"model": model, "data": train_loader, "val_data": val_loader, "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": 2, "task": "classification"}


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    t0 = time.time()
    Xtr, ytr, Xva, yva = build_data()
    log.info("train rows=%d val rows=%d features=%d default rate train=%.3f val=%.3f",
             len(ytr), len(yva), Xtr.shape[1], ytr.mean(), yva.mean())
    train_loader, val_loader = make_loaders(Xtr, ytr, Xva, yva)
    model = DefaultMLP(Xtr.shape[1])
    log.info("model params=%d", sum(p.numel() for p in model.parameters()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    best_auc = 0.0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        tot, n = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        scheduler.step()
        val_loss, val_auc = evaluate(model, val_loader)
        best_auc = max(best_auc, val_auc)
        log.info("epoch %02d/%d train_loss=%.4f val_loss=%.4f val_auc=%.4f lr=%.2e",
                 epoch, EPOCHS, tot / n, val_loss, val_auc, scheduler.get_last_lr()[0])
    log.info("done in %.1fs best val_auc=%.4f", time.time() - t0, best_auc)


if __name__ == "__main__":
    main()

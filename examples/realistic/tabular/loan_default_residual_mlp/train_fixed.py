"""12-month default model for consumer loan applications.

Small residual MLP on the bureau + application tables (joined on application_id),
median imputation with missing-value indicators, log/standard scaling, one-hot
categoricals. Binary cross-entropy, AdamW + cosine decay, stratified 80/20 split.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")
SEED = 11
N_APPS = 16000
EPOCHS = 20
BATCH_SIZE = 256
LR = 1e-3
WEIGHT_DECAY = 1e-4
TARGET = "default_12m"

NUMERIC = ["annual_income", "loan_amount", "term_months", "dti", "credit_history_years",
           "open_accounts", "revol_util", "inquiries_6m",
           "months_since_delinq", "months_since_record", "emp_length_years"]
LOG_COLS = ["annual_income", "loan_amount"]
GAPPY = ["months_since_delinq", "months_since_record", "emp_length_years", "revol_util"]
CATEGORICAL = ["purpose", "home_ownership", "channel"]


# --------------------------------------------------------------------------
# synthetic extract (application system + credit bureau pull)
# --------------------------------------------------------------------------
def write_extract(data_dir=DATA_DIR, seed=SEED):
    rng = np.random.default_rng(seed)
    n = N_APPS
    app_id = rng.choice(np.arange(100000, 999999), n, replace=False)
    income = np.exp(rng.normal(10.9, 0.55, n)).round(-2)
    loan = np.clip(np.exp(rng.normal(9.3, 0.7, n)), 1000, 60000).round(-2)
    term = rng.choice([36, 60], n, p=[0.7, 0.3])
    purpose = rng.choice(["debt_consolidation", "credit_card", "home_improvement", "car", "medical", "other"],
                         n, p=[0.45, 0.2, 0.1, 0.1, 0.05, 0.1])
    home = rng.choice(["rent", "mortgage", "own"], n, p=[0.45, 0.42, 0.13])
    channel = rng.choice(["web", "branch", "broker"], n, p=[0.6, 0.25, 0.15])
    dti = np.clip(rng.gamma(4.0, 4.5, n), 0, 60).round(1)
    hist = np.clip(rng.gamma(3.0, 4.0, n), 0.5, 50).round(1)
    open_acc = rng.poisson(7 + hist / 5)
    inq = rng.poisson(0.9, n)
    revol = np.clip(rng.beta(2.2, 2.8, n) * 100, 0, 100).round(1)
    revol[rng.random(n) < 0.06] = np.nan
    ever_delinq = rng.random(n) < 0.45
    msd = np.where(ever_delinq, np.clip(rng.exponential(36, n), 1, 150).round(), np.nan)
    ever_record = rng.random(n) < 0.14
    msr = np.where(ever_record, np.clip(rng.exponential(40, n), 1, 150).round(), np.nan)
    emp_missing = rng.random(n) < 0.07
    emp = np.where(emp_missing, np.nan, np.clip(rng.gamma(2.0, 3.0, n), 0, 40).round())

    z = (-4.1
         + 2.6 * ever_delinq + 1.0 * np.where(ever_delinq, np.exp(-np.nan_to_num(msd) / 18), 0)
         + 2.0 * ever_record
         + 1.5 * emp_missing
         + 0.035 * (dti - 18) + 0.45 * np.log(loan / income * 10) + 0.25 * (term == 60)
         + 0.18 * inq - 0.025 * hist + 0.008 * np.nan_to_num(revol - 50)
         + 0.35 * (purpose == "medical") - 0.2 * (home == "mortgage") + 0.25 * (channel == "broker"))
    default = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(int)

    apps = pd.DataFrame({"application_id": app_id, "annual_income": income, "loan_amount": loan,
                         "term_months": term, "purpose": purpose, "home_ownership": home,
                         "channel": channel, "emp_length_years": emp, TARGET: default})
    bureau = pd.DataFrame({"application_id": app_id, "dti": dti, "credit_history_years": hist,
                           "open_accounts": open_acc, "revol_util": revol, "inquiries_6m": inq,
                           "months_since_delinq": msd, "months_since_record": msr})
    bureau = bureau.sample(frac=1.0, random_state=seed)
    os.makedirs(data_dir, exist_ok=True)
    apps.to_csv(os.path.join(data_dir, "applications.csv"), index=False)
    bureau.to_csv(os.path.join(data_dir, "bureau.csv"), index=False)


# --------------------------------------------------------------------------
# preprocessing
# --------------------------------------------------------------------------
def load_table(data_dir=DATA_DIR):
    if not os.path.exists(os.path.join(data_dir, "applications.csv")):
        write_extract(data_dir)
    apps = pd.read_csv(os.path.join(data_dir, "applications.csv"))
    bureau = pd.read_csv(os.path.join(data_dir, "bureau.csv"))
    df = apps.merge(bureau, on="application_id", how="left", validate="one_to_one")
    return df


def stratified_split(df, frac_val=0.2, seed=SEED):
    rng = np.random.default_rng(seed)
    val_idx = []
    for _, grp in df.groupby(TARGET):
        idx = grp.index.to_numpy()
        val_idx.append(rng.choice(idx, int(round(len(idx) * frac_val)), replace=False))
    val_mask = df.index.isin(np.concatenate(val_idx))
    return df[~val_mask].reset_index(drop=True), df[val_mask].reset_index(drop=True)


class Preprocessor:
    def fit(self, df):
        self.medians = df[NUMERIC].median()
        num = self._numeric(df.copy())
        self.mu = num.mean()
        self.sigma = num.std().replace(0, 1.0)
        self.levels = {c: sorted(df[c].dropna().unique()) for c in CATEGORICAL}
        return self

    def impute(self, df):
        return df.fillna(self.medians)

    def _numeric(self, df):
        num = self.impute(df)[NUMERIC].astype(float)
        for c in LOG_COLS:
            num[c] = np.log1p(num[c])
        return num

    def missing_flags(self, df):
        return df[GAPPY].isna().astype(np.float32).add_suffix("_missing")

    def one_hot(self, df):
        cols = []
        for c in CATEGORICAL:
            cat = pd.Categorical(df[c], categories=self.levels[c])
            cols.append(pd.get_dummies(cat, prefix=c, dtype=np.float32).set_index(df.index))
        return pd.concat(cols, axis=1)

    def transform(self, df):
        num = (self._numeric(df) - self.mu) / self.sigma
        flags = self.missing_flags(df)
        X = pd.concat([num, flags, self.one_hot(df)], axis=1)
        self.columns = list(X.columns)
        return X.to_numpy(np.float32), df[TARGET].to_numpy(np.float32)


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class ResBlock(nn.Module):
    def __init__(self, dim, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * 2)
        self.fc2 = nn.Linear(dim * 2, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = self.fc2(self.drop(F.gelu(self.fc1(self.norm(x)))))
        return x + self.drop(h)


class ResMLP(nn.Module):
    def __init__(self, n_in, dim=64, n_blocks=2, dropout=0.15):
        super().__init__()
        self.inp = nn.Linear(n_in, dim)
        self.blocks = nn.Sequential(*[ResBlock(dim, dropout) for _ in range(n_blocks)])
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 1))

    def forward(self, x):
        return self.head(self.blocks(self.inp(x))).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return F.binary_cross_entropy_with_logits(model(x), y)


def batches(X, y, batch_size, shuffle, gen=None):
    n = len(y)
    idx = torch.randperm(n, generator=gen) if shuffle else torch.arange(n)
    for s in range(0, n, batch_size):
        b = idx[s:s + batch_size]
        yield X[b], y[b]


def roc_auc(y, score):
    order = np.argsort(score)
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    pos = y == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def build_everything():
    df = load_table()
    train_df, val_df = stratified_split(df)
    pre = Preprocessor().fit(train_df)
    X_tr, y_tr = pre.transform(train_df)
    X_va, y_va = pre.transform(val_df)
    X_tr, y_tr, X_va, y_va = map(torch.from_numpy, (X_tr, y_tr, X_va, y_va))
    model = ResMLP(X_tr.shape[1])
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    return model, opt, pre, (X_tr, y_tr), (X_va, y_va)


def make_target():
    torch.manual_seed(SEED)
    model, opt, pre, (X_tr, y_tr), (X_va, y_va) = build_everything()
    gen = torch.Generator().manual_seed(SEED)
    data = list(batches(X_tr, y_tr, BATCH_SIZE, shuffle=True, gen=gen))
    return {
        "model": model,
        "data": data,
        "val_data": list(batches(X_va, y_va, 2048, shuffle=False)),
        "loss_fn": loss_fn,
        "optimizer": opt,
        "num_classes": 2,
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X)
    loss = F.binary_cross_entropy_with_logits(logits, y).item()
    p = torch.sigmoid(logits).numpy()
    model.train()
    return loss, roc_auc(y.numpy(), p), ((p > 0.5) == y.numpy()).mean()


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    t0 = time.time()
    model, opt, pre, (X_tr, y_tr), (X_va, y_va) = build_everything()
    steps_per_epoch = (len(y_tr) + BATCH_SIZE - 1) // BATCH_SIZE
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS * steps_per_epoch, eta_min=1e-5)
    gen = torch.Generator().manual_seed(SEED)
    print(f"train: {len(y_tr)} rows, default rate {y_tr.mean():.3f} | val: {len(y_va)} rows, "
          f"default rate {y_va.mean():.3f} | features: {X_tr.shape[1]}")
    print(f"params: {sum(p.numel() for p in model.parameters())}")

    step = 0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        tot, n = 0.0, 0
        for batch in batches(X_tr, y_tr, BATCH_SIZE, shuffle=True, gen=gen):
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        val_loss, val_auc, val_acc = evaluate(model, X_va, y_va)
        print(f"epoch {epoch:02d} | step {step:5d} | train_loss {tot / n:.4f} | val_loss {val_loss:.4f} "
              f"| val_auc {val_auc:.4f} | val_acc {val_acc:.4f} | lr {sched.get_last_lr()[0]:.2e}")
    print(f"finished in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

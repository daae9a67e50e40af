"""12-month default model for SME term-loan applications.

Reads the application snapshot exported from the origination system, fits the
preprocessing on the training split (median imputation, log-scaling of the
money columns, standardisation, one-hot encoding) and trains a small MLP
scoring the probability that the loan defaults within 12 months.
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
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(RUN_DIR, "data")
CSV_PATH = os.path.join(DATA_DIR, "sme_applications.csv")

TARGET = "default_12m"
ID_COL = "application_id"
CAT_COLS = ["industry", "region", "legal_form"]
MONEY_COLS = ["annual_revenue", "loan_amount", "avg_daily_balance", "net_cashflow_6m"]
NUM_COLS = ["months_in_business", "num_employees", "owner_fico",
            "credit_utilization", "num_overdrafts_12m"]

N_APPLICATIONS = 14000
VAL_FRAC = 0.2
BATCH_SIZE = 256
EPOCHS = 30
LR = 1e-3
WEIGHT_DECAY = 1e-4
HIDDEN = (128, 64)
DROPOUT = 0.2

logger = logging.getLogger("sme_default")

INDUSTRIES = {
    "construction": 0.45, "retail": 0.25, "hospitality": 0.55, "manufacturing": -0.05,
    "professional_services": -0.35, "healthcare": -0.40, "transport": 0.20, "agriculture": 0.10,
}
REGIONS = {"north": 0.05, "south": 0.15, "east": -0.05, "west": -0.10, "central": 0.0}
LEGAL_FORMS = {"sole_prop": 0.25, "llc": 0.0, "corp": -0.20}


def generate_applications(path, n=N_APPLICATIONS, seed=SEED):
    """Synthetic stand-in for the origination-system export."""
    rng = np.random.default_rng(seed)
    industry = rng.choice(list(INDUSTRIES), size=n, p=[.16, .18, .12, .12, .14, .10, .10, .08])
    region = rng.choice(list(REGIONS), size=n)
    legal_form = rng.choice(list(LEGAL_FORMS), size=n, p=[.35, .45, .20])

    months = np.clip(rng.gamma(2.0, 40.0, size=n), 6, 360).round()
    employees = np.maximum(1, rng.lognormal(2.0, 0.8, size=n)).round()
    revenue = np.exp(11.2 + 0.55 * np.log(employees) + rng.normal(0, 0.3, size=n)).round(-2)
    loan = (revenue * np.exp(rng.normal(-1.6, 0.6, size=n))).round(-2)

    ind_margin = np.array([{"construction": -0.01, "retail": 0.0, "hospitality": -0.02,
                            "manufacturing": 0.02, "professional_services": 0.04,
                            "healthcare": 0.03, "transport": 0.0, "agriculture": 0.01}[i]
                           for i in industry])
    margin = 0.015 + ind_margin + 0.00008 * (months - 80) + rng.normal(0, 0.09, size=n)
    cashflow = (revenue * margin * 0.5).round(0)
    balance = (revenue / 365 * np.exp(rng.normal(2.0, 0.7, size=n)) * (1 + 2.5 * np.clip(margin, 0, None))).round(0)

    fico = np.clip(rng.normal(695 + 60 * np.clip(margin, -0.2, 0.2), 55), 500, 850).round()
    util = np.clip(rng.beta(2.2, 3.5, size=n) + 0.3 * np.clip(-margin, 0, None), 0, 1).round(3)
    overdrafts = rng.poisson(0.4 + 1.5 * np.clip(-margin, 0, None) + 0.5 * util)

    logit = (-3.4
             + 40.0 * np.clip(-margin, 0, None) - 2.0 * margin
             + np.array([INDUSTRIES[i] for i in industry])
             + np.array([REGIONS[r] for r in region])
             + np.array([LEGAL_FORMS[f] for f in legal_form])
             + 0.55 * (np.log(loan) - np.log(revenue) + 1.6)
             - 0.008 * (fico - 695)
             + 0.9 * (util - 0.4)
             - 0.15 * np.log(months / 60)
             + rng.normal(0, 0.2, size=n))
    default = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)

    df = pd.DataFrame({
        ID_COL: np.arange(100000, 100000 + n),
        "industry": industry, "region": region, "legal_form": legal_form,
        "months_in_business": months, "num_employees": employees,
        "annual_revenue": revenue, "loan_amount": loan,
        "avg_daily_balance": balance, "net_cashflow_6m": cashflow,
        "owner_fico": fico, "credit_utilization": util, "num_overdrafts_12m": overdrafts,
        TARGET: default,
    })
    for col, rate in [("owner_fico", 0.06), ("credit_utilization", 0.04), ("avg_daily_balance", 0.03)]:
        df.loc[rng.random(n) < rate, col] = np.nan
    os.makedirs(os.path.dirname(path), exist_ok=True)
    df.to_csv(path, index=False)


def load_applications(path=CSV_PATH):
    if not os.path.exists(path):
        generate_applications(path)
    df = pd.read_csv(path)
    df = df.drop_duplicates(subset=ID_COL).reset_index(drop=True)
    return df


def stratified_split(df, val_frac=VAL_FRAC, seed=SEED):
    rng = np.random.default_rng(seed)
    val_idx = []
    for _, grp in df.groupby(TARGET):
        idx = grp.index.to_numpy()
        n_val = int(round(len(idx) * val_frac))
        val_idx.append(rng.choice(idx, size=n_val, replace=False))
    val_idx = np.concatenate(val_idx)
    is_val = df.index.isin(val_idx)
    return df[~is_val].reset_index(drop=True), df[is_val].reset_index(drop=True)


def log_money(df):
    out = df.copy()
    for col in MONEY_COLS:
        out[col] = np.log1p(out[col].clip(lower=0))
    return out


class Preprocessor:
    """Fit-on-train tabular preprocessing: impute -> log money -> scale -> one-hot."""

    def fit(self, df):
        num = df[MONEY_COLS + NUM_COLS]
        self.medians = num.median()
        num = log_money(num.fillna(self.medians))
        self.mean = num.mean()
        self.std = num.std(ddof=0).replace(0, 1.0)
        self.levels = {c: sorted(df[c].dropna().unique()) for c in CAT_COLS}
        return self

    def transform(self, df):
        num = df[MONEY_COLS + NUM_COLS]
        missing = num[["owner_fico", "credit_utilization", "avg_daily_balance"]].isna().astype(np.float32)
        num = log_money(num.fillna(self.medians))
        num = (num - self.mean) / self.std
        onehots = [
            (df[c].to_numpy()[:, None] == np.array(self.levels[c])[None, :]).astype(np.float32)
            for c in CAT_COLS
        ]
        x = np.hstack([num.to_numpy(np.float32), missing.to_numpy(), *onehots])
        return x.astype(np.float32)

    @property
    def feature_dim(self):
        return len(MONEY_COLS) + len(NUM_COLS) + 3 + sum(len(v) for v in self.levels.values())


class DefaultMLP(nn.Module):
    def __init__(self, in_dim, hidden=HIDDEN, dropout=DROPOUT):
        super().__init__()
        layers, d = [], in_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


def build_datasets():
    df = load_applications()
    train_df, val_df = stratified_split(df)
    prep = Preprocessor().fit(train_df)
    x_tr, x_va = prep.transform(train_df), prep.transform(val_df)
    y_tr = train_df[TARGET].to_numpy(np.float32)
    y_va = val_df[TARGET].to_numpy(np.float32)
    train_ds = TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr))
    val_ds = TensorDataset(torch.from_numpy(x_va), torch.from_numpy(y_va))
    return train_ds, val_ds, prep


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def roc_auc(y_true, score):
    order = np.argsort(score)
    ranks = np.empty(len(score), dtype=np.float64)
    ranks[order] = np.arange(1, len(score) + 1)
    # average ranks for ties
    s_sorted = score[order]
    _, start, counts = np.unique(s_sorted, return_index=True, return_counts=True)
    for st, c in zip(start, counts):
        if c > 1:
            ranks[order[st:st + c]] = ranks[order[st:st + c]].mean()
    pos = y_true == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    losses, scores, ys = [], [], []
    for x, y in loader:
        logits = model(x)
        losses.append(nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="sum").item())
        scores.append(torch.sigmoid(logits).numpy())
        ys.append(y.numpy())
    model.train()
    scores, ys = np.concatenate(scores), np.concatenate(ys)
    return sum(losses) / len(ys), roc_auc(ys, scores), scores, ys


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, prep = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=1024)
    model = DefaultMLP(prep.feature_dim)
    optimizer = make_optimizer(model.parameters())
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    t0 = time.time()
    target = make_target()
    model, optimizer = target["model"], target["optimizer"]
    train_loader, val_loader = target["data"], target["val_data"]
    n_tr, n_va = len(train_loader.dataset), len(val_loader.dataset)
    pos_rate = train_loader.dataset.tensors[1].mean().item()
    logger.info("train=%d val=%d features=%d default_rate=%.3f",
                n_tr, n_va, train_loader.dataset.tensors[0].shape[1], pos_rate)
    logger.info("model params=%d", sum(p.numel() for p in model.parameters()))

    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * len(train_loader))
    best_auc, best_epoch = 0.0, 0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        running, seen = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item() * len(batch[1])
            seen += len(batch[1])
        val_loss, val_auc, _, _ = evaluate(model, val_loader)
        if val_auc > best_auc:
            best_auc, best_epoch = val_auc, epoch
            torch.save(model.state_dict(), os.path.join(RUN_DIR, "best_model.pt"))
        logger.info("epoch %02d/%d train_loss=%.4f val_loss=%.4f val_auc=%.4f val_gini=%.4f lr=%.2e",
                    epoch, EPOCHS, running / seen, val_loss, val_auc, 2 * val_auc - 1,
                    scheduler.get_last_lr()[0])

    logger.info("best val_auc=%.4f at epoch %d (%.1fs)", best_auc, best_epoch, time.time() - t0)


if __name__ == "__main__":
    main()

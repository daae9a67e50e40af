"""Consumer-loan default model (12-month horizon) for the credit-risk team.

Each branch's loan system produces two nightly CSV exports from the same job:
`applications_<branch>.csv` (one row per funded application, application
attributes at decision time) and `outcomes_<branch>.csv` (default flag after
12 months, row-for-row with the applications file). The exports of all
branches are stacked, preprocessed with pandas and fed to an MLP classifier.
Lightning-style epoch logs.
"""
import argparse
import glob
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

CONFIG = dict(
    seed=11,
    branches=["central", "east", "west", "north"],
    branch_sizes=[3000, 2200, 1800, 2400],
    batch_size=128,
    epochs=25,
    lr=1e-3,
    hidden=128,
    dropout=0.1,
    val_frac=0.2,
)

HOME = ["rent", "mortgage", "own", "other"]
PURPOSE = ["debt_consolidation", "car", "home_improvement", "medical", "business", "education", "other"]
BRANCH_RISK = {"central": 0.0, "east": 0.15, "west": -0.1, "north": 0.25}


def write_branch_exports(out_dir, branches, sizes, seed):
    rng = np.random.default_rng(seed)
    app_id = 70_000_000
    for branch, n in zip(branches, sizes):
        age = np.clip(rng.normal(41, 12, n), 19, 80).round()
        income = np.round(np.exp(rng.normal(10.8, 0.55, n)), -2)
        employment_years = np.clip(rng.gamma(2.0, 3.5, n), 0, 45).round(1)
        credit_score = np.clip(rng.normal(680, 60, n) + 1.2 * (age - 41), 450, 850).round()
        term = rng.choice([12, 24, 36, 48, 60], size=n, p=[0.1, 0.2, 0.35, 0.15, 0.2])
        purpose = rng.choice(len(PURPOSE), size=n, p=[0.38, 0.14, 0.14, 0.08, 0.09, 0.05, 0.12])
        home = rng.choice(len(HOME), size=n, p=[0.42, 0.38, 0.15, 0.05])
        loan_amount = np.round(np.clip(income * rng.uniform(0.05, 0.6, n), 1000, 60000), -2)
        dti = np.clip(rng.normal(0.22, 0.09, n) + 0.15 * loan_amount / income, 0.0, 0.95).round(3)
        open_accounts = rng.poisson(6, n)
        delinq_2y = rng.poisson(0.25 + 0.6 * (credit_score < 620), n)
        inquiries_6m = rng.poisson(0.8 + 1.2 * (dti > 0.4), n)
        logit = (-2.0 - 0.03 * (credit_score - 680) + 7.0 * (dti - 0.25) + 1.5 * (loan_amount / income)
                 - 0.07 * employment_years + 0.5 * delinq_2y + 0.25 * inquiries_6m
                 + 0.02 * (term - 36) + 0.8 * (purpose == 4) + 0.45 * (purpose == 3)
                 - 0.5 * (home == 2) + BRANCH_RISK[branch] + 0.4 * rng.normal(size=n))
        defaulted = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)

        credit_score = credit_score.astype(object)
        credit_score[rng.random(n) < 0.04] = np.nan        # thin-file applicants
        employment_years[rng.random(n) < 0.06] = np.nan    # self-employed, not verified
        ids = app_id + np.arange(n)
        app_id += n
        apps = pd.DataFrame({
            "application_id": ids, "branch": branch, "age": age, "annual_income": income,
            "employment_years": employment_years, "credit_score": credit_score, "loan_amount": loan_amount,
            "term_months": term, "purpose": np.array(PURPOSE)[purpose], "home_ownership": np.array(HOME)[home],
            "debt_to_income": dti, "open_accounts": open_accounts, "delinq_2y": delinq_2y,
            "inquiries_6m": inquiries_6m,
        })
        apps.to_csv(os.path.join(out_dir, f"applications_{branch}.csv"), index=False)
        pd.DataFrame({"application_id": ids, "defaulted": defaulted}).to_csv(
            os.path.join(out_dir, f"outcomes_{branch}.csv"), index=False)


def load_applications(data_dir):
    frames = [pd.read_csv(path) for path in sorted(glob.glob(os.path.join(data_dir, "applications_*.csv")))]
    return pd.concat(frames, ignore_index=True)


def load_outcomes(data_dir, branches):
    frames = [pd.read_csv(os.path.join(data_dir, f"outcomes_{b}.csv")) for b in branches]
    return pd.concat(frames, ignore_index=True)


NUMERIC = ["age", "annual_income", "employment_years", "credit_score", "loan_amount", "term_months",
           "debt_to_income", "open_accounts", "delinq_2y", "inquiries_6m", "loan_to_income"]
LOG_COLS = ["annual_income", "loan_amount"]


def build_tensors(cfg, data_dir):
    write_branch_exports(data_dir, cfg["branches"], cfg["branch_sizes"], cfg["seed"])
    apps = load_applications(data_dir)
    outcomes = load_outcomes(data_dir, cfg["branches"])
    # outcome exports come out of the same job, row-for-row with the applications
    df = apps.assign(defaulted=outcomes["defaulted"].to_numpy())

    df["loan_to_income"] = df["loan_amount"] / df["annual_income"]
    num = df[NUMERIC].astype(float).copy()
    num[LOG_COLS] = np.log1p(num[LOG_COLS])
    missing = num[["credit_score", "employment_years"]].isna().astype(float).add_suffix("_missing")

    rng = np.random.default_rng(cfg["seed"])
    idx = rng.permutation(len(df))
    n_val = int(len(df) * cfg["val_frac"])
    val_idx, train_idx = idx[:n_val], idx[n_val:]

    med = num.iloc[train_idx].median()
    num = num.fillna(med)
    mu, sd = num.iloc[train_idx].mean(), num.iloc[train_idx].std() + 1e-6
    cats = pd.get_dummies(df[["purpose", "home_ownership", "branch"]], dtype=float)
    X = pd.concat([(num - mu) / sd, missing, cats], axis=1).to_numpy(dtype=np.float32)
    y = df["defaulted"].to_numpy(dtype=np.float32)

    X_t, y_t = torch.from_numpy(X), torch.from_numpy(y)
    return (X_t[train_idx], y_t[train_idx]), (X_t[val_idx], y_t[val_idx])


class DefaultMLP(nn.Module):
    def __init__(self, d_in, hidden, dropout):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def roc_auc(scores, labels):
    scores, labels = np.asarray(scores), np.asarray(labels)
    ranks = pd.Series(scores).rank().to_numpy()
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), _ = build_tensors(cfg, tmp)
    model = DefaultMLP(X_tr.shape[1], cfg["hidden"], cfg["dropout"])
    bs = cfg["batch_size"]
    data = [(X_tr[i * bs:(i + 1) * bs], y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.Adam(model.parameters(), lr=cfg["lr"]),
            "task": "classification", "num_classes": 2}


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X)
    model.train()
    loss = criterion(logits, y).item()
    acc = ((logits > 0).float() == y).float().mean().item()
    return loss, acc, roc_auc(logits.numpy(), y.numpy())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    p.add_argument("--batch-size", type=int, default=CONFIG["batch_size"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr, batch_size=cli.batch_size)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), (X_va, y_va) = build_tensors(cfg, tmp)
    print(f"Loaded {len(y_tr) + len(y_va)} applications from {len(cfg['branches'])} branches | "
          f"train={len(y_tr)} val={len(y_va)} | default rate={y_tr.mean().item():.3f} | features={X_tr.shape[1]}")

    train_dl = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_tr, y_tr), batch_size=cfg["batch_size"], shuffle=True,
        generator=torch.Generator().manual_seed(cfg["seed"]))
    model = DefaultMLP(X_tr.shape[1], cfg["hidden"], cfg["dropout"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name  | Type       | Params\n0 | model | DefaultMLP | {n_params}")

    for epoch in range(cfg["epochs"]):
        tot, n = 0.0, 0
        for xb, yb in train_dl:
            loss = criterion(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        val_loss, val_acc, val_auc = evaluate(model, X_va, y_va)
        print(f"Epoch {epoch}: train_loss={tot / n:.4f} val_loss={val_loss:.4f} "
              f"val_acc={val_acc:.4f} val_auc={val_auc:.4f}")
    print(f"`Trainer.fit` stopped: `max_epochs={cfg['epochs']}` reached. ({time.time() - t_start:.1f}s)")


if __name__ == "__main__":
    main()

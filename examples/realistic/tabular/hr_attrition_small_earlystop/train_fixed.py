"""Voluntary-attrition risk model (next 12 months) for the People Analytics team.

Input is the HRIS snapshot `employees.csv` joined with the latest engagement
survey (`survey.csv`, not everyone answers). Only ~1.1k employees, so the
model is a small regularised MLP (dropout + AdamW weight decay) with early
stopping on validation loss and best-checkpoint restore. Stratified 80/20
split. Lightning-style logs.
"""
import argparse
import copy
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

CONFIG = dict(
    seed=21,
    n_employees=1100,
    batch_size=32,
    max_epochs=120,
    patience=15,
    lr=5e-4,
    weight_decay=5e-2,
    hidden=128,
    dropout=0.3,
    val_frac=0.2,
)

DEPTS = ["sales", "engineering", "support", "operations", "finance", "hr"]
TRAVEL = ["none", "rarely", "frequently"]
MARITAL = ["single", "married", "divorced"]


def write_exports(out_dir, n, seed):
    rng = np.random.default_rng(seed)
    emp_id = rng.choice(np.arange(10_000, 99_999), n, replace=False)
    age = np.clip(rng.normal(38, 9, n), 20, 64).round()
    tenure = np.clip(rng.gamma(1.8, 3.0, n), 0.1, age - 19).round(1)
    dept = rng.choice(len(DEPTS), n, p=[0.28, 0.25, 0.17, 0.15, 0.09, 0.06])
    level = np.clip(1 + rng.poisson(0.05 * tenure + 0.03 * (age - 20), n), 1, 5)
    income = np.round(2600 * level * np.exp(rng.normal(0, 0.18, n)) * np.array([1.0, 1.25, 0.8, 0.9, 1.1, 0.95])[dept], -1)
    overtime = (rng.random(n) < 0.28 + 0.1 * (dept == 0)).astype(int)
    travel = rng.choice(3, n, p=[0.15, 0.65, 0.2])
    marital = rng.choice(3, n, p=[0.35, 0.48, 0.17])
    distance = np.clip(rng.gamma(1.6, 6.0, n), 1, 60).round()
    yrs_promo = np.clip(tenure * rng.uniform(0, 1, n), 0, None).round(1)
    raise_pct = np.clip(rng.normal(3.5, 1.5, n) + 0.4 * (level - 2), 0, 12).round(1)
    n_companies = rng.poisson(1.5 + 0.05 * (age - 25).clip(0), n)
    training_hours = rng.poisson(20, n)
    perf = rng.choice([2, 3, 4], n, p=[0.12, 0.7, 0.18])
    job_sat = rng.integers(1, 5, n)
    env_sat = rng.integers(1, 5, n)
    wlb = rng.integers(1, 5, n)
    mgr_changes = rng.poisson(0.6, n)

    logit = (-2.9 + 1.0 * overtime - 0.35 * (job_sat - 2.5) - 0.3 * (env_sat - 2.5) - 0.3 * (wlb - 2.5)
             - 0.08 * (tenure - 5) - 0.35 * (level - 2) + 0.6 * (marital == 0) + 0.55 * (travel == 2)
             + 0.02 * (distance - 10) + 0.12 * yrs_promo - 0.15 * (raise_pct - 3.5) + 0.15 * n_companies
             + 0.3 * mgr_changes - 0.03 * (age - 38) + 0.9 * rng.normal(size=n))
    left = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)

    employees = pd.DataFrame({
        "employee_id": emp_id, "age": age, "tenure_years": tenure, "department": np.array(DEPTS)[dept],
        "job_level": level, "monthly_income": income, "overtime": overtime,
        "business_travel": np.array(TRAVEL)[travel], "marital_status": np.array(MARITAL)[marital],
        "distance_km": distance, "years_since_promotion": yrs_promo, "last_raise_pct": raise_pct,
        "num_companies_worked": n_companies, "training_hours_last_year": training_hours,
        "performance_rating": perf, "manager_changes_2y": mgr_changes, "left_within_12m": left,
    })
    answered = rng.random(n) < 0.82
    survey = pd.DataFrame({"employee_id": emp_id, "job_satisfaction": job_sat, "environment_satisfaction": env_sat,
                           "work_life_balance": wlb})[answered].sample(frac=1.0, random_state=seed)
    employees.to_csv(os.path.join(out_dir, "employees.csv"), index=False)
    survey.to_csv(os.path.join(out_dir, "survey.csv"), index=False)


NUMERIC = ["age", "tenure_years", "job_level", "monthly_income", "overtime", "distance_km",
           "years_since_promotion", "last_raise_pct", "num_companies_worked", "training_hours_last_year",
           "performance_rating", "manager_changes_2y", "job_satisfaction", "environment_satisfaction",
           "work_life_balance", "survey_missing"]
CATEGORICAL = ["department", "business_travel", "marital_status"]


def stratified_split(y, val_frac, seed):
    rng = np.random.default_rng(seed)
    val_idx = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        val_idx.append(idx[:int(round(len(idx) * val_frac))])
    val_idx = np.sort(np.concatenate(val_idx))
    train_idx = np.setdiff1d(np.arange(len(y)), val_idx)
    return train_idx, val_idx


def build_tensors(cfg, data_dir):
    write_exports(data_dir, cfg["n_employees"], cfg["seed"])
    emp = pd.read_csv(os.path.join(data_dir, "employees.csv"))
    survey = pd.read_csv(os.path.join(data_dir, "survey.csv"))
    df = emp.merge(survey, on="employee_id", how="left", validate="one_to_one")
    df["survey_missing"] = df["job_satisfaction"].isna().astype(float)
    df["monthly_income"] = np.log(df["monthly_income"])

    y = df["left_within_12m"].to_numpy(dtype=np.float32)
    train_idx, val_idx = stratified_split(y, cfg["val_frac"], cfg["seed"])
    num = df[NUMERIC].astype(float)
    num = num.fillna(num.iloc[train_idx].median())
    mu, sd = num.iloc[train_idx].mean(), num.iloc[train_idx].std() + 1e-6
    X = pd.concat([(num - mu) / sd, pd.get_dummies(df[CATEGORICAL], dtype=float)], axis=1).to_numpy(np.float32)
    X_t, y_t = torch.from_numpy(X), torch.from_numpy(y)
    return (X_t[train_idx], y_t[train_idx]), (X_t[val_idx], y_t[val_idx])


class AttritionMLP(nn.Module):
    def __init__(self, d_in, hidden, dropout):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def roc_auc(scores, labels):
    ranks = pd.Series(scores).rank().to_numpy()
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), _ = build_tensors(cfg, tmp)
    model = AttritionMLP(X_tr.shape[1], cfg["hidden"], cfg["dropout"])
    bs = cfg["batch_size"]
    data = [(X_tr[i * bs:(i + 1) * bs], y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"]),
            "task": "classification", "num_classes": 2}


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X)
    model.train()
    return criterion(logits, y).item(), roc_auc(logits.numpy(), y.numpy())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-epochs", type=int, default=CONFIG["max_epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    p.add_argument("--patience", type=int, default=CONFIG["patience"])
    cli = p.parse_args()
    cfg = dict(CONFIG, max_epochs=cli.max_epochs, lr=cli.lr, patience=cli.patience)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), (X_va, y_va) = build_tensors(cfg, tmp)
    print(f"train: {len(y_tr)} employees ({y_tr.mean().item():.1%} left) | val: {len(y_va)} employees "
          f"({y_va.mean().item():.1%} left) | {X_tr.shape[1]} features")

    train_dl = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_tr, y_tr), batch_size=cfg["batch_size"], shuffle=True,
        generator=torch.Generator().manual_seed(cfg["seed"]))
    model = AttritionMLP(X_tr.shape[1], cfg["hidden"], cfg["dropout"])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])

    best_loss, best_epoch, best_state, wait = float("inf"), -1, None, 0
    for epoch in range(cfg["max_epochs"]):
        tot, n = 0.0, 0
        for xb, yb in train_dl:
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        val_loss, val_auc = evaluate(model, X_va, y_va)
        print(f"Epoch {epoch}: train_loss={tot / n:.4f} val_loss={val_loss:.4f} val_auc={val_auc:.4f}")
        if val_loss < best_loss - 1e-4:
            if best_state is not None:
                print(f"Metric val_loss improved by {best_loss - val_loss:.4f} >= min_delta = 0.0001. "
                      f"New best score: {val_loss:.4f}")
            best_loss, best_epoch, best_state, wait = val_loss, epoch, copy.deepcopy(model.state_dict()), 0
        else:
            wait += 1
            if wait >= cfg["patience"]:
                print(f"Monitored metric val_loss did not improve in the last {cfg['patience']} records. "
                      f"Best score: {best_loss:.4f}. Signaling Trainer to stop.")
                break

    model.load_state_dict(best_state)
    val_loss, val_auc = evaluate(model, X_va, y_va)
    print(f"Restoring best checkpoint from epoch {best_epoch}: val_loss={val_loss:.4f} val_auc={val_auc:.4f} "
          f"({time.time() - t_start:.1f}s)")


if __name__ == "__main__":
    main()

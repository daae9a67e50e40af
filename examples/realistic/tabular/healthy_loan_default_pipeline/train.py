"""Probability-of-default model for personal-loan applications.

Two exports: `applications.csv` (one row per application, with the 12-month
default outcome) and `credit_bureau.csv` (one row per applicant, pulled by the
bureau in its own order, with a few applicants missing). They are merged on
applicant_id, split stratified into train/validation, scaled with statistics
from the training split only, and fed to an MLP with BCE loss.
HF-Trainer-style dict logging.
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

ARGS = dict(
    seed=1234,
    n_applications=6000,
    per_device_train_batch_size=64,
    num_train_epochs=20,
    learning_rate=2e-4,
    weight_decay=0.01,
    warmup_ratio=0.05,
    logging_steps=50,
    eval_frac=0.2,
    hidden=256,
    dropout=0.0,
)

PURPOSES = ["debt_consolidation", "credit_card", "home_improvement", "car", "medical", "small_business", "other"]
PURPOSE_RISK = np.array([0.0, -0.1, -0.3, -0.2, 0.3, 0.6, 0.2])
HOMES = ["rent", "mortgage", "own"]


def write_exports(out_dir, n, seed):
    rng = np.random.default_rng(seed)
    n_people = int(n * 0.93)
    person_id = rng.choice(np.arange(3_000_000, 4_000_000), size=n_people, replace=False)
    applicant = rng.integers(0, n_people, size=n)              # a few people apply more than once

    credit_score = np.clip(rng.normal(685, 55, size=n_people), 480, 850).round()
    util = np.clip(rng.beta(2.0, 3.0, size=n_people), 0, 1)
    delinq = rng.poisson(np.clip(0.25 + (700 - credit_score) / 250, 0.05, None))
    history = np.clip(rng.normal(120, 60, size=n_people), 6, 480).round()
    open_acc = rng.poisson(7, size=n_people) + 1
    inquiries = rng.poisson(1.0, size=n_people)

    income = np.round(rng.lognormal(11.0, 0.5, size=n), -2)
    amount = np.round(np.clip(income * rng.uniform(0.05, 0.45, size=n), 1000, 40000), -2)
    term = rng.choice([36, 60], size=n, p=[0.7, 0.3])
    emp_years = np.clip(rng.poisson(5, size=n), 0, 10)
    purpose = rng.choice(len(PURPOSES), size=n, p=[0.38, 0.2, 0.1, 0.08, 0.06, 0.06, 0.12])
    home = rng.choice(len(HOMES), size=n, p=[0.45, 0.4, 0.15])
    cs = credit_score[applicant]
    rate = np.round(np.clip(6 + (760 - cs) * 0.06 + 1.5 * (term == 60) + rng.normal(0, 1.5, size=n), 5, 30), 2)
    monthly = amount * (rate / 1200) / (1 - (1 + rate / 1200) ** -term)
    dti = np.clip(12 * monthly / income + rng.normal(0.15, 0.06, size=n), 0.02, 0.9)

    logit = (-1.75 - 0.9 * (cs - 685) / 55 + 2.5 * (util[applicant] - 0.4)
             + 0.35 * delinq[applicant] + 2.0 * (dti - 0.25) + 0.25 * (term == 60)
             + 0.2 * inquiries[applicant] - 0.05 * emp_years + PURPOSE_RISK[purpose] - 0.25 * (home == 2)
             - 0.002 * (history[applicant] - 120) + 0.6 * (history[applicant] < 24)
             + 4.0 * np.maximum(dti - 0.4, 0) * (util[applicant] > 0.6) + 0.5 * (delinq[applicant] > 0) * (term == 60)
             + rng.normal(0, 0.7, size=n))                     # income shocks, job loss, ... not in the data
    defaulted = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)

    app_date = pd.Timestamp("2021-01-01") + pd.to_timedelta(np.sort(rng.integers(0, 730, size=n)), unit="D")
    apps = pd.DataFrame({
        "application_id": np.arange(1, n + 1), "applicant_id": person_id[applicant],
        "application_date": app_date.date.astype(str), "loan_amount": amount, "term_months": term,
        "interest_rate": rate, "purpose": np.array(PURPOSES)[purpose], "annual_income": income,
        "employment_years": emp_years, "home_ownership": np.array(HOMES)[home], "dti": dti.round(3),
        "defaulted_12m": defaulted,
    })
    bureau = pd.DataFrame({
        "applicant_id": person_id, "credit_score": credit_score, "revolving_util": util.round(3),
        "delinquencies_2y": delinq, "credit_history_months": history, "open_accounts": open_acc,
        "inquiries_6m": inquiries,
    })
    bureau = bureau.sample(frac=0.985, random_state=seed)      # no-hit files at the bureau
    apps_path = os.path.join(out_dir, "applications.csv")
    bureau_path = os.path.join(out_dir, "credit_bureau.csv")
    apps.to_csv(apps_path, index=False)
    bureau.to_csv(bureau_path, index=False)
    return apps_path, bureau_path


NUMERIC = ["loan_amount", "term_months", "interest_rate", "annual_income", "employment_years", "dti",
           "credit_score", "revolving_util", "delinquencies_2y", "credit_history_months", "open_accounts",
           "inquiries_6m", "loan_to_income"]
LOG_COLS = ["loan_amount", "annual_income"]
BUREAU_COLS = ["credit_score", "revolving_util", "delinquencies_2y", "credit_history_months", "open_accounts",
               "inquiries_6m"]


def load_frame(apps_path, bureau_path):
    apps = pd.read_csv(apps_path, parse_dates=["application_date"])
    bureau = pd.read_csv(bureau_path)
    df = apps.merge(bureau, on="applicant_id", how="left", validate="many_to_one")
    df["bureau_no_hit"] = df["credit_score"].isna().astype(float)
    df["loan_to_income"] = df["loan_amount"] / df["annual_income"]
    return df


def build_datasets(args, tmp_dir):
    df = load_frame(*write_exports(tmp_dir, args["n_applications"], args["seed"]))
    y = df["defaulted_12m"].to_numpy(dtype=np.float32)

    rng = np.random.default_rng(args["seed"])
    val_idx = np.concatenate([rng.choice(np.flatnonzero(y == c), size=int(round((y == c).sum() * args["eval_frac"])),
                                         replace=False) for c in (0, 1)])
    train_mask = np.ones(len(df), dtype=bool)
    train_mask[val_idx] = False
    train_df, val_df = df[train_mask], df[~train_mask]

    medians = train_df[BUREAU_COLS].median()
    num_tr = train_df[NUMERIC].fillna(medians)
    num_va = val_df[NUMERIC].fillna(medians)
    num_tr[LOG_COLS] = np.log(num_tr[LOG_COLS])
    num_va[LOG_COLS] = np.log(num_va[LOG_COLS])
    mu, sd = num_tr.mean(), num_tr.std()
    cat_cols = pd.get_dummies(train_df[["purpose", "home_ownership"]], dtype=float).columns

    def to_tensors(part, num):
        cats = pd.get_dummies(part[["purpose", "home_ownership"]], dtype=float).reindex(columns=cat_cols,
                                                                                         fill_value=0.0)
        X = pd.concat([(num - mu) / sd, cats, part[["bureau_no_hit"]]], axis=1).to_numpy(dtype=np.float32)
        return torch.from_numpy(X), torch.from_numpy(part["defaulted_12m"].to_numpy(dtype=np.float32))

    return to_tensors(train_df, num_tr), to_tensors(val_df, num_va)


class DefaultModel(nn.Module):
    def __init__(self, d_in, hidden, dropout):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, 1))

    def forward(self, features, labels=None):
        logits = self.net(features).squeeze(-1)
        loss = None if labels is None else nn.functional.binary_cross_entropy_with_logits(logits, labels)
        return {"loss": loss, "logits": logits}


def loss_fn(model, batch):
    return model(**batch)["loss"]


def make_optimizer(model, args):
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args["learning_rate"])


def make_target():
    args = dict(ARGS)
    torch.manual_seed(args["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), _ = build_datasets(args, tmp)
    perm = torch.randperm(len(y_tr), generator=torch.Generator().manual_seed(args["seed"]))
    bs = args["per_device_train_batch_size"]
    data = [{"features": X_tr[perm[i * bs:(i + 1) * bs]], "labels": y_tr[perm[i * bs:(i + 1) * bs]]}
            for i in range(4)]
    model = DefaultModel(X_tr.shape[1], args["hidden"], args["dropout"])
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model, args), "task": "classification", "num_classes": 2}


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    out = model(features=X, labels=y)
    model.train()
    probs = torch.sigmoid(out["logits"]).numpy()
    return {"eval_loss": round(out["loss"].item(), 4),
            "eval_accuracy": round(float(((probs > 0.5) == y.numpy()).mean()), 4),
            "eval_auc": round(roc_auc(probs, y.numpy()), 4)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num_train_epochs", type=int, default=ARGS["num_train_epochs"])
    p.add_argument("--learning_rate", type=float, default=ARGS["learning_rate"])
    cli = p.parse_args()
    args = dict(ARGS, num_train_epochs=cli.num_train_epochs, learning_rate=cli.learning_rate)

    np.random.seed(args["seed"])
    torch.manual_seed(args["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), (X_va, y_va) = build_datasets(args, tmp)

    train_dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X_tr, y_tr),
                                           batch_size=args["per_device_train_batch_size"], shuffle=True,
                                           generator=torch.Generator().manual_seed(args["seed"]))
    model = DefaultModel(X_tr.shape[1], args["hidden"], args["dropout"])
    opt = make_optimizer(model, args)
    total = len(train_dl) * args["num_train_epochs"]
    warm = int(total * args["warmup_ratio"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm)))

    print("***** Running training *****")
    print(f"  Num examples = {len(y_tr)}")
    print(f"  Num Epochs = {args['num_train_epochs']}")
    print(f"  Instantaneous batch size per device = {args['per_device_train_batch_size']}")
    print(f"  Total optimization steps = {total}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters()):,}")

    step, running, n_run, total_loss, t0 = 0, 0.0, 0, 0.0, time.time()
    for epoch in range(args["num_train_epochs"]):
        for xb, yb in train_dl:
            loss = loss_fn(model, {"features": xb, "labels": yb})
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            running += loss.item()
            total_loss += loss.item()
            n_run += 1
            if step % args["logging_steps"] == 0:
                print({"loss": round(running / n_run, 4), "grad_norm": round(float(gn), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / len(train_dl), 2)})
                running, n_run = 0.0, 0
        metrics = evaluate(model, X_va, y_va)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)

    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(len(y_tr) * args["num_train_epochs"] / rt, 1),
           "train_steps_per_second": round(total / rt, 2), "train_loss": round(total_loss / total, 4),
           "epoch": float(args["num_train_epochs"])})
    print(json.dumps(evaluate(model, X_va, y_va)))


if __name__ == "__main__":
    main()

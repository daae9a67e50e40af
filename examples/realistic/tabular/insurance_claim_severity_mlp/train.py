"""Claim severity classifier (none / minor / moderate / major) for motor policies.

Policy + driver table -> entity embeddings for categoricals, standardised
numerics -> MLP. Class-weighted cross entropy because severe claims are rare.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

SEED = 1234
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(RUN_DIR, "data", "motor_claims.csv")
N_POLICIES = 16000

TARGET = "severity"
CLASSES = ["major", "minor", "moderate", "none"]
NUM_COLS = ["driver_age", "years_licensed", "vehicle_age", "vehicle_value", "annual_mileage",
            "prior_claims", "policy_tenure", "deductible", "credit_score"]
CAT_COLS = ["region", "vehicle_type", "occupation", "garaging"]

BATCH_SIZE = 256
EPOCHS = 20
LR = 3e-3
WEIGHT_DECAY = 1e-4
EMB_DIM = 6
LOG_EVERY = 100


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def write_claims_csv(path, n=N_POLICIES, seed=SEED):
    rng = np.random.default_rng(seed)
    regions = [f"R{i:02d}" for i in range(18)]
    vtypes = ["hatchback", "sedan", "suv", "pickup", "van", "coupe", "motorbike"]
    occs = ["office", "trades", "student", "retired", "driver", "healthcare", "sales", "unemployed", "other"]
    garaging = ["garage", "driveway", "street"]
    reg_eff = dict(zip(regions, rng.normal(0, 0.35, len(regions))))
    vt_eff = dict(zip(vtypes, [0.0, -0.1, 0.15, 0.25, 0.3, 0.45, 0.9]))
    occ_eff = dict(zip(occs, rng.normal(0, 0.25, len(occs))))
    gar_eff = {"garage": -0.25, "driveway": 0.0, "street": 0.3}

    age = np.clip(rng.normal(44, 15, n), 18, 90).round()
    lic = np.clip(age - 17 - rng.gamma(2.0, 2.5, n), 0, None).round()
    region = rng.choice(regions, n)
    vtype = rng.choice(vtypes, n, p=[0.24, 0.26, 0.2, 0.1, 0.08, 0.07, 0.05])
    occ = rng.choice(occs, n)
    gar = rng.choice(garaging, n, p=[0.35, 0.4, 0.25])
    vage = np.clip(rng.gamma(2.2, 3.2, n), 0, 30).round()
    value = np.round(np.clip(42000 * np.exp(-0.11 * vage) * rng.lognormal(0, 0.35, n), 800, None), -2)
    miles = np.round(np.clip(rng.lognormal(np.log(11000), 0.45, n), 1000, 60000), -2)
    prior = rng.poisson(0.35 + 0.4 * (age < 25), n)
    tenure = np.clip(rng.exponential(4.0, n), 0, 30).round(1)
    deduct = rng.choice([250, 500, 750, 1000, 2000], n, p=[0.2, 0.35, 0.2, 0.17, 0.08])
    credit = np.clip(rng.normal(680, 70, n), 350, 850).round()

    z = (
        0.55 * prior
        + 1.1 * np.exp(-(age - 18) / 6.0)
        + 0.012 * np.maximum(age - 70, 0)
        - 0.04 * np.minimum(lic, 15)
        + 0.45 * np.log(miles / 11000)
        + 0.25 * np.log(value / 20000)
        - 0.0025 * (credit - 680)
        - 0.0002 * (deduct - 500)
        - 0.04 * np.minimum(tenure, 8)
        + np.array([reg_eff[r] for r in region])
        + np.array([vt_eff[v] for v in vtype])
        + np.array([occ_eff[o] for o in occ])
        + np.array([gar_eff[g] for g in gar])
        + rng.logistic(0, 0.45, n)
    )
    cuts = np.quantile(z, [0.5, 0.8, 0.95])
    sev = np.array(["none", "minor", "moderate", "major"])[np.searchsorted(cuts, z)]

    df = pd.DataFrame({
        "policy_id": [f"P{700000 + i}" for i in range(n)],
        "driver_age": age, "years_licensed": lic, "vehicle_age": vage, "vehicle_value": value,
        "annual_mileage": miles, "prior_claims": prior, "policy_tenure": tenure, "deductible": deduct,
        "credit_score": credit, "region": region, "vehicle_type": vtype, "occupation": occ,
        "garaging": gar, TARGET: sev,
    })
    for col, frac in [("annual_mileage", 0.07), ("credit_score", 0.12), ("occupation", 0.05),
                      ("vehicle_value", 0.02)]:
        df[col] = df[col].astype(object)
        df.loc[rng.random(n) < frac, col] = np.nan
    os.makedirs(os.path.dirname(path), exist_ok=True)
    df.to_csv(path, index=False)


def stratified_split(df, val_frac=0.2, seed=SEED):
    rng = np.random.default_rng(seed)
    val_idx = []
    for _, grp in df.groupby(TARGET):
        idx = grp.index.to_numpy()
        val_idx.append(rng.choice(idx, int(round(len(idx) * val_frac)), replace=False))
    val_mask = df.index.isin(np.concatenate(val_idx))
    return df[~val_mask].reset_index(drop=True), df[val_mask].reset_index(drop=True)


class Preprocessor:
    def fit(self, df):
        num = df[NUM_COLS].astype(float)
        self.medians = num.median()
        num = num.fillna(self.medians)
        self.mean, self.std = num.mean(), num.std().replace(0, 1.0)
        self.vocab = {}
        for c in CAT_COLS:
            levels = df[c].fillna("__nan__").value_counts()
            self.vocab[c] = {v: i + 1 for i, v in enumerate(sorted(levels[levels >= 5].index))}  # 0 = unseen
        self.class_to_idx = {c: i for i, c in enumerate(CLASSES)}
        return self

    def transform(self, df):
        num = ((df[NUM_COLS].astype(float).fillna(self.medians) - self.mean) / self.std).to_numpy(np.float32)
        cat = np.stack([df[c].fillna("__nan__").map(self.vocab[c]).fillna(0).to_numpy(np.int64)
                        for c in CAT_COLS], axis=1)
        y = df[TARGET].map(self.class_to_idx).to_numpy(np.int64)
        return num, cat, y

    @property
    def cardinalities(self):
        return [len(self.vocab[c]) + 1 for c in CAT_COLS]


class ClaimsDataset(Dataset):
    def __init__(self, num, cat, y):
        self.num, self.cat, self.y = torch.tensor(num), torch.tensor(cat), torch.tensor(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.num[i], self.cat[i], self.y[i]


def class_weights(labels):
    counts = labels.value_counts()
    w = len(labels) / (len(counts) * counts)
    return torch.tensor(w.to_numpy(), dtype=torch.float32)


def build_data():
    if not os.path.exists(CSV_PATH):
        write_claims_csv(CSV_PATH)
    df = pd.read_csv(CSV_PATH)
    train_df, val_df = stratified_split(df)
    prep = Preprocessor().fit(train_df)
    train_ds = ClaimsDataset(*prep.transform(train_df))
    val_ds = ClaimsDataset(*prep.transform(val_df))
    weights = class_weights(train_df[TARGET])
    return train_ds, val_ds, prep, weights


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class SeverityNet(nn.Module):
    def __init__(self, n_num, cardinalities, n_classes, emb_dim=EMB_DIM, hidden=(192, 96), dropout=0.15):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(c, emb_dim) for c in cardinalities])
        d = n_num + emb_dim * len(cardinalities)
        layers = []
        for h in hidden:
            layers += [nn.Linear(d, h), nn.SiLU(), nn.Dropout(dropout)]
            d = h
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Linear(d, n_classes)

    def forward(self, num, cat):
        e = [emb(cat[:, i]) for i, emb in enumerate(self.embs)]
        return self.head(self.mlp(torch.cat([num] + e, dim=1)))


def make_loss_fn(weights):
    def loss_fn(model, batch):
        num, cat, y = batch
        return F.cross_entropy(model(num, cat), y, weight=weights)
    return loss_fn


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, prep, weights = build_data()
    g = torch.Generator().manual_seed(SEED)
    model = SeverityNet(len(NUM_COLS), prep.cardinalities, len(CLASSES))
    return {
        "model": model,
        "data": DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g),
        "val_data": DataLoader(val_ds, batch_size=2048),
        "loss_fn": make_loss_fn(weights),
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
        "class_names": CLASSES,
    }


# ----------------------------------------------------------------------------
# eval
# ----------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model, loader, n_classes):
    model.eval()
    total_loss, n = 0.0, 0
    conf = torch.zeros(n_classes, n_classes, dtype=torch.long)
    for num, cat, y in loader:
        logits = model(num, cat)
        total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        n += len(y)
        pred = logits.argmax(1)
        conf += torch.bincount(y * n_classes + pred, minlength=n_classes ** 2).view(n_classes, n_classes)
    model.train()
    conf = conf.double()
    tp = conf.diag()
    recall = tp / conf.sum(1).clamp(min=1)
    precision = tp / conf.sum(0).clamp(min=1)
    f1 = 2 * precision * recall / (precision + recall).clamp(min=1e-12)
    return {
        "val_loss": total_loss / n,
        "val_acc": (tp.sum() / conf.sum()).item(),
        "val_bal_acc": recall.mean().item(),
        "val_macro_f1": f1.mean().item(),
        "recall": recall.tolist(),
    }


def main():
    torch.manual_seed(SEED)
    train_ds, val_ds, prep, weights = build_data()
    print(f"[data] train={len(train_ds)} val={len(val_ds)} classes={CLASSES} "
          f"cat_cardinalities={prep.cardinalities}")
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=2048)

    model = SeverityNet(len(NUM_COLS), prep.cardinalities, len(CLASSES))
    print(f"[model] params={sum(p.numel() for p in model.parameters()):,}")
    optimizer = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(train_loader)
    warmup = len(train_loader)
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))
    loss_fn = make_loss_fn(weights)

    step, t_start, t_log = 0, time.time(), time.time()
    best_f1 = 0.0
    for epoch in range(EPOCHS):
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sched.step()
            step += 1
            if step % LOG_EVERY == 0:
                dt = (time.time() - t_log) / LOG_EVERY * 1000
                t_log = time.time()
                print(f"step {step:5d} | epoch {epoch} | loss {loss.item():.4f} | lr {sched.get_last_lr()[0]:.2e} | {dt:.1f} ms/step")
        m = evaluate(model, val_loader, len(CLASSES))
        best_f1 = max(best_f1, m["val_macro_f1"])
        print(f"[eval] epoch {epoch} | val_loss {m['val_loss']:.4f} | val_acc {m['val_acc']:.4f} | "
              f"val_bal_acc {m['val_bal_acc']:.4f} | val_macro_f1 {m['val_macro_f1']:.4f}")
    print("per-class val recall: " + ", ".join(f"{c}={r:.3f}" for c, r in zip(CLASSES, m["recall"])))
    print(f"done in {time.time() - t_start:.1f}s | best val_macro_f1 {best_f1:.4f}")


if __name__ == "__main__":
    main()

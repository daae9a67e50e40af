"""Underwriting risk-tier classifier (6 tiers) for the motor book.

policyholders + vehicles (1:1) + prior_claims (1:n, aggregated) -> one-hot / standardised
features -> MLP. Logging mimics the HF Trainer dict lines the team dashboards parse.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import make_data

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 17
N_TIERS = 6
BATCH_SIZE = 128
EPOCHS = 12
LR = 1e-3
WARMUP_STEPS = 100
WEIGHT_DECAY = 0.01
LOGGING_STEPS = 100

CAT_COLS = ["occupation", "area", "vehicle_class", "usage"]
NUM_COLS = ["driver_age", "licence_years", "log_annual_km", "vehicle_age", "log_engine_kw",
            "log_vehicle_value", "n_claims", "n_at_fault_3y", "log_claim_total", "young_driver"]
TARGET = "risk_tier"


def load_frames(data_dir=HERE):
    if not os.path.exists(os.path.join(data_dir, "policyholders.csv")):
        make_data.generate(out_dir=data_dir)
    read = lambda name: pd.read_csv(os.path.join(data_dir, name))
    return read("policyholders.csv"), read("vehicles.csv"), read("prior_claims.csv"), read("underwriting_tiers.csv")


def claims_features(claims):
    claims = claims.assign(recent_at_fault=((claims.at_fault == 1) & (claims.years_ago <= 3)).astype(int))
    return claims.groupby("policy_id").agg(
        n_claims=("claim_amount", "size"),
        n_at_fault_3y=("recent_at_fault", "sum"),
        claim_total=("claim_amount", "sum"),
    ).reset_index()


def assemble(policies, vehicles, claims, tiers):
    df = policies.merge(vehicles, on="policy_id", how="inner")
    df = df.merge(claims_features(claims), on="policy_id", how="left")
    df = df.merge(tiers, on="policy_id", how="inner")
    df[["n_claims", "n_at_fault_3y", "claim_total"]] = df[["n_claims", "n_at_fault_3y", "claim_total"]].fillna(0)
    df["log_annual_km"] = np.log(df["annual_km"])
    df["log_engine_kw"] = np.log(df["engine_kw"])
    df["log_vehicle_value"] = np.log(df["vehicle_value"])
    df["log_claim_total"] = np.log1p(df["claim_total"])
    df["young_driver"] = (df["driver_age"] < 25).astype(float)
    return df


def stratified_split(df, val_frac=0.15, seed=SEED):
    rng = np.random.default_rng(seed)
    val_idx = []
    for _, grp in df.groupby(TARGET):
        idx = grp.index.to_numpy()
        val_idx.append(rng.choice(idx, int(round(len(idx) * val_frac)), replace=False))
    val_idx = np.concatenate(val_idx)
    is_val = df.index.isin(val_idx)
    return df[~is_val].reset_index(drop=True), df[is_val].reset_index(drop=True)


def fit_transformer(train_df):
    return {
        "mean": train_df[NUM_COLS].mean(),
        "std": train_df[NUM_COLS].std().replace(0, 1.0),
        "dummy_cols": pd.get_dummies(train_df[CAT_COLS], columns=CAT_COLS).columns,
    }


def transform(df, tf):
    num = ((df[NUM_COLS] - tf["mean"]) / tf["std"]).to_numpy(np.float32)
    cat = pd.get_dummies(df[CAT_COLS], columns=CAT_COLS).reindex(columns=tf["dummy_cols"], fill_value=0)
    x = np.concatenate([num, cat.to_numpy(np.float32)], axis=1)
    y = df[TARGET].to_numpy(np.int64)
    return torch.tensor(x), torch.tensor(y)


def prepare_datasets():
    df = assemble(*load_frames())
    train_df, val_df = stratified_split(df)
    tf = fit_transformer(train_df)
    return TensorDataset(*transform(train_df, tf)), TensorDataset(*transform(val_df, tf))


def train_dataloader(ds):
    return DataLoader(ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                      generator=torch.Generator().manual_seed(SEED))


class RiskTierMLP(nn.Module):
    def __init__(self, n_in, n_classes=N_TIERS, hidden=(256, 128, 64), dropout=0.1):
        super().__init__()
        layers, d = [], n_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        layers += [nn.Linear(d, n_classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


criterion = nn.CrossEntropyLoss()


def compute_loss(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def linear_warmup_decay(optimizer, total_steps, warmup=WARMUP_STEPS):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


@torch.no_grad()
def evaluate(model, ds):
    model.eval()
    x, y = ds.tensors
    out = model(x)
    loss = criterion(out, y).item()
    pred = out.argmax(-1)
    acc = (pred == y).float().mean().item()
    within_one = ((pred - y).abs() <= 1).float().mean().item()
    model.train()
    return {"eval_loss": round(loss, 4), "eval_accuracy": round(acc, 4), "eval_within_one_tier": round(within_one, 4)}


def make_target():
    train_ds, _ = prepare_datasets()
    it = iter(train_dataloader(train_ds))
    torch.manual_seed(SEED)
    return {
        "model": RiskTierMLP(train_ds.tensors[0].shape[1]),
        "data": [next(it) for _ in range(6)],
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": N_TIERS,
        "task": "classification",
    }


def main():
    start = time.time()
    train_ds, val_ds = prepare_datasets()
    loader = train_dataloader(train_ds)
    torch.manual_seed(SEED)
    model = RiskTierMLP(train_ds.tensors[0].shape[1])
    optimizer = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(loader)
    scheduler = linear_warmup_decay(optimizer, total_steps)

    print("***** Running training *****")
    print(f"  Num examples = {len(train_ds)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters() if p.requires_grad)}")

    model.train()
    step, running, n_running = 0, 0.0, 0
    for epoch in range(EPOCHS):
        for batch in loader:
            loss = compute_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            n_running += 1
            if step % LOGGING_STEPS == 0:
                print({"loss": round(running / n_running, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / len(loader), 2)})
                running, n_running = 0.0, 0
        metrics = evaluate(model, val_ds)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(EPOCHS * len(train_ds) / runtime, 1),
           "train_steps_per_second": round(total_steps / runtime, 2), "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()

"""Fault-type classifier for industrial pumps from SCADA sensor snapshots.

readings.csv (one row per labelled snapshot) is joined with machines.csv
(asset register). Split is by machine so validation assets are unseen.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")

SEED = 42
BATCH_SIZE = 128
EPOCHS = 10
MAX_LR = 3e-3
WEIGHT_DECAY = 1e-2
LABEL_SMOOTHING = 0.1
DROPOUT = 0.3
LOGGING_STEPS = 100

FAULTS = ["normal", "bearing_wear", "overheating", "electrical", "misalignment"]
SENSOR_COLS = ["temp_c", "vibration_rms", "pressure_bar", "current_a", "rpm", "humidity", "flow_lpm"]
CAT_COLS = ["pump_model", "site"]


# --------------------------------------------------------------------------
# synthetic SCADA export
# --------------------------------------------------------------------------
def generate_csvs(n_machines=400, n_readings=24000, seed=11):
    rng = np.random.default_rng(seed)
    os.makedirs(DATA_DIR, exist_ok=True)
    models = ["KSB-200", "KSB-350", "GRF-90", "GRF-120", "XYL-75", "XYL-150"]
    rated = dict(zip(models, [1450, 1480, 2900, 2950, 1750, 1460]))
    sites = ["plant_a", "plant_b", "plant_c", "offshore_1", "harbour"]
    machines = pd.DataFrame({
        "machine_id": [f"P{i:04d}" for i in range(n_machines)],
        "pump_model": rng.choice(models, n_machines),
        "site": rng.choice(sites, n_machines, p=[0.3, 0.25, 0.2, 0.1, 0.15]),
        "install_year": rng.integers(2004, 2023, n_machines),
    })
    machines["rated_rpm"] = machines.pump_model.map(rated)
    machines["machine_bias"] = rng.normal(0, 1, n_machines)

    m = machines.iloc[rng.integers(0, n_machines, n_readings)].reset_index(drop=True)
    fault = rng.choice(len(FAULTS), n_readings, p=[0.72, 0.09, 0.08, 0.06, 0.05])
    age = 2024 - m.install_year.to_numpy()
    ambient = np.where(m.site.isin(["offshore_1", "harbour"]), 14.0, 22.0)
    temp = ambient + 35 + 0.4 * age + 2.5 * m.machine_bias + rng.normal(0, 3, n_readings)
    vib = np.exp(rng.normal(0.3 + 0.02 * age, 0.25, n_readings))
    pressure = rng.normal(6.0, 0.6, n_readings)
    current = rng.normal(42, 4, n_readings) + 0.8 * m.machine_bias
    rpm = m.rated_rpm.to_numpy() * rng.normal(1.0, 0.01, n_readings)
    humidity = np.clip(rng.normal(55, 15, n_readings) + 15 * (ambient < 20), 5, 100)
    flow = rng.normal(300, 30, n_readings)

    b = fault == 1
    vib[b] *= np.exp(rng.normal(0.7, 0.3, b.sum())); temp[b] += rng.normal(4, 2, b.sum())
    o = fault == 2
    temp[o] += rng.normal(11, 4, o.sum()); current[o] += rng.normal(3, 2, o.sum())
    flow[o] -= rng.normal(35, 15, o.sum())
    e = fault == 3
    current[e] += rng.normal(9, 4, e.sum()) * rng.choice([-1, 1], e.sum())
    rpm[e] *= rng.normal(0.97, 0.015, e.sum())
    a = fault == 4
    vib[a] *= np.exp(rng.normal(0.45, 0.25, a.sum())); pressure[a] -= rng.normal(0.6, 0.3, a.sum())
    rpm[a] *= rng.normal(0.99, 0.01, a.sum())

    readings = pd.DataFrame({
        "reading_id": np.arange(n_readings), "machine_id": m.machine_id,
        "temp_c": temp.round(2), "vibration_rms": vib.round(3), "pressure_bar": pressure.round(3),
        "current_a": current.round(2), "rpm": rpm.round(0), "humidity": humidity.round(1),
        "flow_lpm": flow.round(1), "fault_type": np.array(FAULTS)[fault],
    })
    machines.drop(columns="machine_bias").to_csv(os.path.join(DATA_DIR, "machines.csv"), index=False)
    readings.to_csv(os.path.join(DATA_DIR, "readings.csv"), index=False)


# --------------------------------------------------------------------------
# preprocessing
# --------------------------------------------------------------------------
def load_frame():
    if not os.path.exists(os.path.join(DATA_DIR, "readings.csv")):
        generate_csvs()
    readings = pd.read_csv(os.path.join(DATA_DIR, "readings.csv"))
    machines = pd.read_csv(os.path.join(DATA_DIR, "machines.csv"))
    df = readings.merge(machines, on="machine_id", how="left", validate="many_to_one")
    df["asset_age"] = 2024 - df["install_year"]
    df["rpm_ratio"] = df["rpm"] / df["rated_rpm"]
    df["log_vibration"] = np.log(df["vibration_rms"])
    return df


FEATURES = ["temp_c", "log_vibration", "pressure_bar", "current_a", "rpm_ratio",
            "humidity", "flow_lpm", "asset_age"]


def group_split(df, val_frac=0.2, seed=SEED):
    machines = np.sort(df.machine_id.unique())
    rng = np.random.default_rng(seed)
    val_machines = set(rng.choice(machines, int(len(machines) * val_frac), replace=False))
    is_val = df.machine_id.isin(val_machines)
    return df[~is_val].reset_index(drop=True), df[is_val].reset_index(drop=True)


class FeaturePipeline:
    def fit(self, df):
        self.mu = df[FEATURES].mean()
        self.sigma = df[FEATURES].std()
        self.levels = {c: sorted(df[c].unique()) for c in CAT_COLS}
        self.label_to_id = {f: i for i, f in enumerate(FAULTS)}
        return self

    def transform(self, df):
        num = ((df[FEATURES] - self.mu) / self.sigma).to_numpy(dtype=np.float32)
        onehots = [pd.get_dummies(pd.Categorical(df[c], categories=self.levels[c])).to_numpy(dtype=np.float32)
                   for c in CAT_COLS]
        x = np.concatenate([num] + onehots, axis=1)
        y = df["fault_type"].map(self.label_to_id).to_numpy(dtype=np.int64)
        return torch.tensor(x), torch.tensor(y)


def build_data():
    df = load_frame()
    train_df, val_df = group_split(df)
    pipe = FeaturePipeline().fit(train_df)
    return TensorDataset(*pipe.transform(train_df)), TensorDataset(*pipe.transform(val_df)), pipe


def train_loader_for(ds):
    return DataLoader(ds, batch_size=BATCH_SIZE, shuffle=True,
                      generator=torch.Generator().manual_seed(SEED))


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class FaultMLP(nn.Module):
    def __init__(self, in_dim, n_classes, hidden=256, dropout=DROPOUT):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x):
        return self.net(x)


train_criterion = nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING)


def loss_fn(model, batch):
    x, y = batch
    return train_criterion(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=MAX_LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, ds):
    model.eval()
    x, y = ds.tensors
    logits = model(x)
    pred = logits.argmax(1)
    f1s = []
    for k in range(len(FAULTS)):
        tp = ((pred == k) & (y == k)).sum().item()
        fp = ((pred == k) & (y != k)).sum().item()
        fn = ((pred != k) & (y == k)).sum().item()
        f1s.append(2 * tp / max(2 * tp + fp + fn, 1))
    return {"eval_loss": F.cross_entropy(logits, y).item(),
            "eval_accuracy": (pred == y).float().mean().item(),
            "eval_macro_f1": float(np.mean(f1s))}


def make_target():
    torch.manual_seed(SEED)
    train_ds, _, pipe = build_data()
    data = []
    for batch in train_loader_for(train_ds):
        data.append(batch)
        if len(data) == 5:
            break
    model = FaultMLP(train_ds.tensors[0].shape[1], len(FAULTS))
    return {"model": model, "data": data, "loss_fn": loss_fn, "make_optimizer": make_optimizer,
            "num_classes": len(FAULTS), "task": "classification"}


def main():
    torch.manual_seed(SEED)
    train_ds, val_ds, pipe = build_data()
    train_loader = train_loader_for(train_ds)
    model = FaultMLP(train_ds.tensors[0].shape[1], len(FAULTS))
    optimizer = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=MAX_LR, total_steps=total_steps,
                                                    pct_start=0.3)
    print("***** Running training *****")
    print(f"  Num examples = {len(train_ds)}")
    print(f"  Num eval examples = {len(val_ds)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters() if p.requires_grad)}")

    start, step, running = time.time(), 0, []
    for epoch in range(EPOCHS):
        model.train()
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            running.append(loss.item())
            if step % LOGGING_STEPS == 0:
                print({"loss": round(float(np.mean(running)), 4),
                       "grad_norm": round(float(torch.norm(torch.stack(
                           [p.grad.norm() for p in model.parameters() if p.grad is not None]))), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / len(train_loader), 2)})
                running = []
        metrics = evaluate(model, val_ds)
        metrics = {k: round(v, 4) for k, v in metrics.items()}
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(EPOCHS * len(train_ds) / runtime, 1),
           "train_steps_per_second": round(total_steps / runtime, 2), "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()

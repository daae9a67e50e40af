"""Visit-duration model for outpatient capacity planning.

Reads the EHR visit extract (one CSV row per check-in, exported clinic by
clinic), engineers triage / patient / calendar features and regresses
log(visit_minutes) with an MLP. Train on the earlier visits, validate on the
most recent ones. Lightning-style progress output.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

HPARAMS = dict(
    seed=11,
    n_visits=6000,
    batch_size=32,
    max_epochs=25,
    lr=1e-3,
    weight_decay=1e-4,
    hidden=256,
    val_frac=0.2,
)

CLINICS = ["cardiology", "dermatology", "family_med", "orthopedics", "pediatrics", "womens_health"]
CLINIC_EFFECT = np.array([0.30, -0.35, 0.0, 0.15, -0.20, 0.10])


def write_extract(out_dir, n, seed):
    rng = np.random.default_rng(seed)
    clinic = rng.integers(0, len(CLINICS), size=n)
    day = pd.Timestamp("2023-01-02") + pd.to_timedelta(rng.integers(0, 540, size=n), unit="D")
    minute_of_day = rng.integers(7 * 60, 18 * 60, size=n)
    checkin = day + pd.to_timedelta(minute_of_day, unit="min")
    hour = minute_of_day // 60

    age = np.where(clinic == 4, rng.integers(0, 18, size=n), rng.integers(18, 92, size=n))
    triage = rng.choice([1, 2, 3, 4, 5], size=n, p=[0.05, 0.15, 0.40, 0.30, 0.10])
    chronic = rng.poisson(np.clip(0.3 + 0.04 * (age - 18), 0.2, None))
    new_patient = (rng.random(n) < 0.22).astype(int)
    interpreter = (rng.random(n) < 0.08).astype(int)
    n_orders = rng.poisson(0.8 + 0.35 * (5 - triage))
    bmi = np.round(np.clip(rng.normal(27, 5, size=n), 15, 55), 1)
    distance_km = np.round(rng.lognormal(2.2, 0.8, size=n), 1)
    days_since_last = np.where(new_patient == 1, 0, rng.integers(7, 720, size=n))
    provider = rng.choice(["MD", "NP", "PA"], size=n, p=[0.6, 0.25, 0.15])

    log_minutes = (3.35 + 0.22 * n_orders + 0.10 * chronic + 0.30 * new_patient + 0.28 * interpreter
                   - 0.12 * (triage - 3) + 0.004 * (age - 45) + CLINIC_EFFECT[clinic]
                   + 0.15 * ((hour >= 11) & (hour <= 13)) + 0.08 * (provider == "NP")
                   + rng.normal(0, 0.14, size=n))
    minutes = np.round(np.exp(log_minutes), 1)
    disposition = np.where(rng.random(n) < 0.04, "left_without_being_seen",
                           rng.choice(["discharged", "follow_up_booked", "referred"], size=n, p=[0.6, 0.3, 0.1]))
    minutes = np.where(disposition == "left_without_being_seen", np.round(rng.uniform(5, 40, size=n), 1), minutes)
    bmi = np.where(rng.random(n) < 0.03, np.nan, bmi)

    df = pd.DataFrame({
        "visit_id": rng.permutation(np.arange(700_000, 700_000 + n)),
        "mrn": rng.integers(1_000_000, 9_999_999, size=n),
        "clinic": np.array(CLINICS)[clinic],
        "checkin_time": checkin,
        "age": age, "bmi": bmi, "triage_level": triage, "chronic_conditions": chronic,
        "new_patient": new_patient, "interpreter_needed": interpreter, "orders_placed": n_orders,
        "distance_km": distance_km, "days_since_last_visit": days_since_last,
        "provider_type": provider, "disposition": disposition, "visit_minutes": minutes,
    })
    df = df.sort_values(["clinic", "checkin_time"], kind="stable")
    path = os.path.join(out_dir, "visits_extract.csv")
    df.to_csv(path, index=False)
    return path


NUMERIC = ["age", "bmi", "triage_level", "chronic_conditions", "orders_placed", "distance_km",
           "days_since_last_visit", "hour", "minute_of_day", "weekday", "days_since_start", "new_patient",
           "interpreter_needed", "is_lunch"]


def build_features(visits):
    feats = visits[["checkin_time", "age", "bmi", "triage_level", "chronic_conditions", "orders_placed",
                    "distance_km", "days_since_last_visit", "new_patient", "interpreter_needed"]].copy()
    feats["bmi"] = feats["bmi"].fillna(feats["bmi"].median())
    feats["distance_km"] = np.log1p(feats["distance_km"])
    feats["hour"] = feats["checkin_time"].dt.hour
    feats["minute_of_day"] = feats["hour"] * 60 + feats["checkin_time"].dt.minute
    feats["weekday"] = feats["checkin_time"].dt.day_of_week
    feats["days_since_start"] = (feats["checkin_time"] - feats["checkin_time"].min()).dt.days
    feats["is_lunch"] = feats["hour"].between(11, 13).astype(int)
    dummies = pd.get_dummies(visits[["clinic", "provider_type"]], dtype=float)
    return pd.concat([feats, dummies], axis=1)


def build_datasets(hp, tmp_dir):
    path = write_extract(tmp_dir, hp["n_visits"], hp["seed"])
    visits = pd.read_csv(path, parse_dates=["checkin_time"])
    visits = visits[visits["disposition"] != "left_without_being_seen"]
    visits = visits.sort_values("checkin_time").reset_index(drop=True)

    target = np.log(visits["visit_minutes"])
    feats = build_features(visits)

    n_train = int(len(feats) * (1 - hp["val_frac"]))
    X = feats.drop(columns="checkin_time").astype(float)
    mu, sd = X[NUMERIC].iloc[:n_train].mean(), X[NUMERIC].iloc[:n_train].std()
    X[NUMERIC] = (X[NUMERIC] - mu) / sd
    X = X.to_numpy(dtype=np.float32)
    y = target.to_numpy(dtype=np.float32)
    y_mu, y_sd = float(y[:n_train].mean()), float(y[:n_train].std())
    y = (y - y_mu) / y_sd

    X_t, y_t = torch.from_numpy(X), torch.from_numpy(y)
    train = torch.utils.data.TensorDataset(X_t[:n_train], y_t[:n_train])
    val = torch.utils.data.TensorDataset(X_t[n_train:], y_t[n_train:])
    return train, val, (y_mu, y_sd)


class VisitDurationModel(nn.Module):
    def __init__(self, d_in, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def configure_optimizers(model, hp):
    return torch.optim.AdamW(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])


def make_target():
    hp = dict(HPARAMS)
    torch.manual_seed(hp["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train, _, _ = build_datasets(hp, tmp)
    X, y = train.tensors
    model = VisitDurationModel(X.shape[1], hp["hidden"])
    bs = hp["batch_size"]
    data = [(X[i * bs:(i + 1) * bs], y[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": configure_optimizers(model, hp), "task": "regression"}


@torch.no_grad()
def validate(model, val, y_stats):
    model.eval()
    X, y = val.tensors
    pred = model(X)
    model.train()
    y_mu, y_sd = y_stats
    mae_min = (torch.exp(pred * y_sd + y_mu) - torch.exp(y * y_sd + y_mu)).abs().mean().item()
    return nn.functional.mse_loss(pred, y).item(), mae_min


def print_summary(model):
    print("  | Name | Type       | Params")
    print("------------------------------------")
    print(f"0 | net  | Sequential | {sum(p.numel() for p in model.parameters()) / 1000:.1f} K")
    print("------------------------------------")
    n = sum(p.numel() for p in model.parameters())
    print(f"{n / 1000:.1f} K     Trainable params")
    print("0         Non-trainable params")
    print(f"{n / 1000:.1f} K     Total params")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max_epochs", type=int, default=HPARAMS["max_epochs"])
    p.add_argument("--lr", type=float, default=HPARAMS["lr"])
    cli = p.parse_args()
    hp = dict(HPARAMS, max_epochs=cli.max_epochs, lr=cli.lr)

    np.random.seed(hp["seed"])
    torch.manual_seed(hp["seed"])
    print(f"Seed set to {hp['seed']}")
    with tempfile.TemporaryDirectory() as tmp:
        train, val, y_stats = build_datasets(hp, tmp)
    loader = torch.utils.data.DataLoader(train, batch_size=hp["batch_size"], shuffle=True,
                                         generator=torch.Generator().manual_seed(hp["seed"]))
    model = VisitDurationModel(train.tensors[0].shape[1], hp["hidden"])
    opt = configure_optimizers(model, hp)
    print("GPU available: False, used: False")
    print_summary(model)
    print(f"train samples: {len(train)}  val samples: {len(val)}")

    n_batches = len(loader)
    for epoch in range(hp["max_epochs"]):
        t0 = time.time()
        tot, n = 0.0, 0
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(y)
            n += len(y)
        val_loss, val_mae = validate(model, val, y_stats)
        dt = max(time.time() - t0, 1e-6)
        print(f"Epoch {epoch}: 100%|██████████| {n_batches}/{n_batches} [00:{int(dt):02d}<00:00, "
              f"{n_batches / dt:.2f}it/s, v_num=0, train_loss_step={loss.item():.3f}, val_loss={val_loss:.3f}, "
              f"val_mae_min={val_mae:.2f}, train_loss_epoch={tot / n:.3f}]")
    print(f"`Trainer.fit` stopped: `max_epochs={hp['max_epochs']}` reached.")


if __name__ == "__main__":
    main()

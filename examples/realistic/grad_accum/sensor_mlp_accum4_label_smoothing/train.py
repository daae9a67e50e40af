"""MLP fault classifier on synthetic multi-sensor readings.

Micro-batches of 32, 4 micro-batches per optimizer step (effective 128),
bf16 autocast on CPU, AdamW + OneCycle, label smoothing 0.1, grad clipping.
Writes sensors_train.csv / sensors_val.csv on first run.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

SEED = 7
N_FEATURES = 12
FAULT_TYPES = ["ok", "bearing", "imbalance", "misalignment", "looseness"]
N_TRAIN, N_VAL = 6000, 2000
MICRO_BS = 32
ACCUM_STEPS = 4
EPOCHS = 20
MAX_LR = 3e-3
WEIGHT_DECAY = 1e-2
LABEL_SMOOTHING = 0.1
DROPOUT = 0.3
CLIP = 1.0
LOG_EVERY = 15

FEATURES = [f"s{i:02d}" for i in range(N_FEATURES)]


# --------------------------------------------------------------------------- data

def generate_sensor_csv(path, n, seed):
    """Readings from a fixed random 'plant' model: fault type is a nonlinear
    function of the sensor channels plus a little mislabelling from technicians."""
    plant = np.random.default_rng(1234)
    w1 = plant.normal(size=(N_FEATURES, 32))
    w2 = plant.normal(size=(32, len(FAULT_TYPES)))
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, N_FEATURES))
    x[:, :4] *= rng.uniform(0.5, 3.0, size=4)  # channels with different gains
    logits = np.tanh(x @ w1 / np.sqrt(N_FEATURES)) @ w2
    y = logits.argmax(1)
    flip = rng.random(n) < 0.03
    y[flip] = rng.integers(0, len(FAULT_TYPES), size=flip.sum())
    df = pd.DataFrame(x * 10.0 + 50.0, columns=FEATURES)  # raw units
    df["fault"] = [FAULT_TYPES[i] for i in y]
    df.to_csv(path, index=False, float_format="%.3f")


def load_split(path):
    df = pd.read_csv(path)
    x = torch.tensor(df[FEATURES].values, dtype=torch.float32)
    y = torch.tensor(df["fault"].map({k: i for i, k in enumerate(FAULT_TYPES)}).values, dtype=torch.long)
    return x, y


def build_loaders():
    here = os.path.dirname(os.path.abspath(__file__))
    tr_path = os.path.join(here, "sensors_train.csv")
    va_path = os.path.join(here, "sensors_val.csv")
    if not os.path.exists(tr_path):
        generate_sensor_csv(tr_path, N_TRAIN, SEED)
        generate_sensor_csv(va_path, N_VAL, SEED + 1)
    x_tr, y_tr = load_split(tr_path)
    x_va, y_va = load_split(va_path)
    mu, sigma = x_tr.mean(0), x_tr.std(0)
    x_tr, x_va = (x_tr - mu) / sigma, (x_va - mu) / sigma
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=MICRO_BS, shuffle=True,
                              drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(x_va, y_va), batch_size=500)
    return train_loader, val_loader


# --------------------------------------------------------------------------- model

class FaultMLP(nn.Module):
    def __init__(self, d_in=N_FEATURES, hidden=256, n_classes=len(FAULT_TYPES)):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Dropout(DROPOUT),
            nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Dropout(DROPOUT),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x):
        return self.net(x)


def build_model():
    torch.manual_seed(SEED)
    return FaultMLP()


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=MAX_LR, weight_decay=WEIGHT_DECAY)


def compute_loss(model, batch):
    x, y = batch
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits = model(x)
    return F.cross_entropy(logits.float(), y, label_smoothing=LABEL_SMOOTHING)


@torch.no_grad()
def validate(model, loader):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for x, y in loader:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(x).float()
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += y.numel()
    model.train()
    return loss_sum / n, correct / n


def make_target():
    train_loader, _ = build_loaders()
    data = []
    for batch in train_loader:
        data.append(batch)
        if len(data) == ACCUM_STEPS:
            break
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(FAULT_TYPES),
        "task": "classification",
    }


# --------------------------------------------------------------------------- train

def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader) // ACCUM_STEPS
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=MAX_LR, epochs=EPOCHS, steps_per_epoch=steps_per_epoch, pct_start=0.25)

    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name | Type      | Params")
    print("-----------------------------------")
    print(f"0 | net  | FaultMLP  | {n_params / 1e3:.1f} K")
    print("-----------------------------------")
    print(f"accumulate_grad_batches={ACCUM_STEPS}, precision=bf16-mixed, gradient_clip_val={CLIP}")

    global_step = 0
    t_start = time.time()
    for epoch in range(EPOCHS):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        window_losses, epoch_losses = [], []
        for i, batch in enumerate(train_loader):
            if i >= steps_per_epoch * ACCUM_STEPS:
                break  # leftover micro-batches that do not fill an accumulation window
            loss = compute_loss(model, batch)
            (loss / ACCUM_STEPS).backward()
            window_losses.append(loss.item())
            if (i + 1) % ACCUM_STEPS:
                continue
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            global_step += 1
            step_loss = sum(window_losses) / len(window_losses)
            epoch_losses.append(step_loss)
            window_losses = []
            if global_step % LOG_EVERY == 0:
                print(f"Epoch {epoch}: step {global_step} | train_loss_step={step_loss:.4f} "
                      f"grad_norm={grad_norm.item():.3f} lr-AdamW={scheduler.get_last_lr()[0]:.2e}")
        val_loss, val_acc = validate(model, val_loader)
        print(f"Epoch {epoch}: {steps_per_epoch}/{steps_per_epoch} [{time.time() - t_start:.1f}s] "
              f"train_loss_epoch={np.mean(epoch_losses):.4f} val_loss={val_loss:.4f} val_acc={val_acc:.4f}")
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()

"""Activity recognition from wrist-worn IMU windows (wellness app prototype).

Each example is one variable-length window (2-5 s at 10 Hz) of 3-axis
accelerometer plus the band's gyro magnitude, labelled from the user's
activity diary: still, walk, run, cycle, stairs. Windows are zero-padded to
the longest window in the batch and packed before a GRU encoder; the last
hidden state feeds a linear classifier. Logs mimic the HF Trainer.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

CONFIG = dict(
    seed=21,
    n_train=320,
    n_val=240,
    min_len=20,
    max_len=50,
    n_features=4,
    hidden=128,
    layers=1,
    batch_size=16,
    epochs=40,
    lr=3e-3,
    weight_decay=0.01,
    clip=1.0,
    early_stopping_patience=5,
    logging_steps=20,
)

ACTIVITIES = ["still", "walk", "run", "cycle", "stairs"]


def simulate_window(rng, activity, length):
    t = np.arange(length) / 10.0
    gravity = rng.normal([0.0, 0.0, 1.0], 0.25)  # how the band sits on the wrist
    gravity /= np.linalg.norm(gravity)
    acc = np.tile(gravity, (length, 1))
    if activity == 0:
        gyro = np.abs(rng.normal(0.05, 0.03, size=length))
    else:
        freq = {1: 1.8, 2: 2.7, 3: 1.3, 4: 1.5}[activity] * rng.uniform(0.8, 1.2)
        amp = {1: 0.35, 2: 0.8, 3: 0.2, 4: 0.45}[activity] * rng.uniform(0.6, 1.4)
        phase = rng.uniform(0, 2 * math.pi)
        swing = np.sin(2 * math.pi * freq * t + phase)
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        acc = acc + amp * swing[:, None] * axis[None, :]
        if activity == 4:  # stairs: irregular step impacts
            acc[:, 2] += 0.3 * (rng.random(length) < 0.12)
        if activity == 3:  # cycling: handlebar vibration, little arm swing
            acc += rng.normal(0, 0.12, size=acc.shape)
        gyro = np.abs(amp * 2.0 * np.cos(2 * math.pi * freq * t + phase)) + np.abs(rng.normal(0, 0.1, size=length))
    acc += rng.normal(0, 0.12, size=acc.shape)
    return np.concatenate([acc, gyro[:, None]], axis=1).astype(np.float32)


def make_split(n, cfg, seed):
    rng = np.random.default_rng(seed)
    labels = rng.choice(len(ACTIVITIES), size=n, p=[0.3, 0.25, 0.1, 0.15, 0.2])
    lengths = rng.integers(cfg["min_len"], cfg["max_len"] + 1, size=n)
    seqs = [torch.from_numpy(simulate_window(rng, int(a), int(L))) for a, L in zip(labels, lengths)]
    # diary labels are entered after the fact; a fraction of windows carry the wrong activity
    wrong = rng.random(n) < 0.15
    labels[wrong] = rng.integers(0, len(ACTIVITIES), size=wrong.sum())
    return seqs, torch.from_numpy(labels.astype(np.int64))


def collate(items):
    seqs, labels = zip(*items)
    lengths = torch.tensor([len(s) for s in seqs])
    return pad_sequence(list(seqs), batch_first=True), lengths, torch.stack(labels)


class WindowDataset(torch.utils.data.Dataset):
    def __init__(self, seqs, labels, mean, std):
        self.seqs = [(s - mean) / std for s in seqs]
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.seqs[i], self.labels[i]


def build_datasets(cfg):
    tr_seqs, tr_y = make_split(cfg["n_train"], cfg, cfg["seed"])
    va_seqs, va_y = make_split(cfg["n_val"], cfg, cfg["seed"] + 500)
    cat = torch.cat(tr_seqs)
    mean, std = cat.mean(0), cat.std(0) + 1e-6
    return WindowDataset(tr_seqs, tr_y, mean, std), WindowDataset(va_seqs, va_y, mean, std)


class GRUClassifier(nn.Module):
    def __init__(self, n_features, hidden, layers, n_classes):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)
        return self.out(h[-1])


def loss_fn(model, batch):
    x, lengths, y = batch
    return F.cross_entropy(model(x, lengths), y)


def build_optimizer(model, cfg):
    return torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    train_ds, _ = build_datasets(cfg)
    model = GRUClassifier(cfg["n_features"], cfg["hidden"], cfg["layers"], len(ACTIVITIES))
    bs = cfg["batch_size"]
    data = [collate([train_ds[j] for j in range(i * bs, (i + 1) * bs)]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": build_optimizer(model, cfg), "task": "classification", "num_classes": len(ACTIVITIES)}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    train_ds, val_ds = build_datasets(cfg)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, collate_fn=collate,
                                           generator=torch.Generator().manual_seed(cfg["seed"]))
    val_dl = torch.utils.data.DataLoader(val_ds, batch_size=64, collate_fn=collate)

    model = GRUClassifier(cfg["n_features"], cfg["hidden"], cfg["layers"], len(ACTIVITIES))
    opt = build_optimizer(model, cfg)
    total_steps = cfg["epochs"] * len(train_dl)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - 0.9 * s / total_steps)
    print(f"***** Running training *****\n  Num examples = {len(train_ds)}\n  Num Epochs = {cfg['epochs']}\n"
          f"  Instantaneous batch size per device = {cfg['batch_size']}\n  Total optimization steps = {total_steps}")

    t_start = time.time()
    step, running, running_n = 0, 0.0, 0
    best_loss, best_epoch, best_state, bad_epochs = float("inf"), 0, None, 0
    for epoch in range(cfg["epochs"]):
        for x, lengths, y in train_dl:
            loss = F.cross_entropy(model(x, lengths), y)
            opt.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
            opt.step()
            sched.step()
            step += 1
            running += loss.item()
            running_n += 1
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(running / running_n, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": round(sched.get_last_lr()[0], 6),
                       "epoch": round(step / len(train_dl), 2)})
                running, running_n = 0.0, 0
        val_loss, val_acc = evaluate(model, val_dl)
        print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4),
               "epoch": float(epoch + 1)})
        if val_loss < best_loss:
            best_loss, best_epoch, bad_epochs = val_loss, epoch + 1, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            bad_epochs += 1
            if bad_epochs >= cfg["early_stopping_patience"]:
                break
    model.load_state_dict(best_state)
    val_loss, val_acc = evaluate(model, val_dl)
    print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4), "epoch": float(best_epoch)})
    train_loss, train_acc = evaluate(model, torch.utils.data.DataLoader(train_ds, batch_size=64, collate_fn=collate))
    elapsed = time.time() - t_start
    print({"train_runtime": round(elapsed, 2), "train_samples_per_second": round(len(train_ds) * (epoch + 1) / elapsed, 2),
           "train_loss": round(train_loss, 4), "train_accuracy": round(train_acc, 4), "epoch": float(epoch + 1)})


if __name__ == "__main__":
    main()

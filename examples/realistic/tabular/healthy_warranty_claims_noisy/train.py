"""Warranty-claim approval classifier (approved vs rejected).

Labels come from human adjusters, who disagree with each other a lot, so the
target is noisy. Small MLP on standardised numeric features, AdamW, cosine LR,
early stopping on val_loss with best-checkpoint restore. Lightning-style logs.
"""
import argparse
import copy
import csv
import math
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HPARAMS = {
    "seed": 1234,
    "n_rows": 6000,
    "val_frac": 0.2,
    "test_frac": 0.2,
    "batch_size": 128,
    "max_epochs": 60,
    "lr": 3e-3,
    "weight_decay": 1e-2,
    "hidden": 64,
    "dropout": 0.1,
    "patience": 8,
    "adjuster_flip_rate": 0.28,
}

COLUMNS = ["product_age_days", "purchase_price", "claim_amount", "prior_claims", "dealer_score",
           "days_to_report", "photos_attached", "model_year_offset", "region_risk", "call_minutes"]


def export_claims_csv(path, n, seed, flip_rate):
    """Stand-in for the claims-system export."""
    rng = np.random.default_rng(seed)
    age = rng.gamma(2.0, 180.0, size=n)
    price = np.exp(rng.normal(6.0, 0.6, size=n))
    ratio = np.clip(rng.beta(2, 5, size=n), 0.01, 1.0)
    amount = price * ratio
    prior = rng.poisson(0.6, size=n)
    dealer = rng.normal(3.5, 0.8, size=n)
    delay = rng.exponential(20.0, size=n)
    photos = rng.integers(0, 6, size=n)
    my_off = rng.integers(-4, 2, size=n)
    region = rng.uniform(0, 1, size=n)
    call = rng.gamma(2.0, 6.0, size=n)

    # policy the adjusters are supposed to follow (in-warranty, reasonable amount, documented)
    score = (1.6 * np.tanh((730 - age) / 200.0) - 2.2 * (ratio - 0.3) - 0.5 * (prior - 0.6)
             + 0.4 * (dealer - 3.5) - 0.02 * (delay - 20) + 0.35 * (photos - 2.5) - 0.6 * (region - 0.5))
    approved = (score > 0).astype(int)
    flips = rng.random(n) < flip_rate
    label = np.where(flips, 1 - approved, approved)

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["claim_id"] + COLUMNS + ["approved"])
        for i in range(n):
            w.writerow([f"CLM-{i:06d}", round(age[i], 1), round(price[i], 2), round(amount[i], 2), prior[i],
                        round(dealer[i], 2), round(delay[i], 1), photos[i], my_off[i], round(region[i], 3),
                        round(call[i], 1), label[i]])


def load_claims(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    X = np.array([[float(r[c]) for c in COLUMNS] for r in rows], dtype=np.float64)
    y = np.array([int(r["approved"]) for r in rows], dtype=np.int64)
    # heavy-tailed money columns -> log space
    X[:, 1] = np.log(X[:, 1])
    X[:, 2] = np.log(X[:, 2])
    X[:, 9] = np.log1p(X[:, 9])
    return X, y


class Standardizer:
    def fit(self, X):
        self.mu, self.sd = X.mean(0), X.std(0) + 1e-8
        return self

    def transform(self, X):
        return ((X - self.mu) / self.sd).astype(np.float32)


def build_splits(hp, tmp_dir):
    path = os.path.join(tmp_dir, "claims_export.csv")
    export_claims_csv(path, hp["n_rows"], hp["seed"], hp["adjuster_flip_rate"])
    X, y = load_claims(path)
    rng = np.random.default_rng(hp["seed"] + 7)
    perm = rng.permutation(len(X))
    n_val, n_test = int(len(X) * hp["val_frac"]), int(len(X) * hp["test_frac"])
    te, va, tr = perm[:n_test], perm[n_test:n_test + n_val], perm[n_test + n_val:]
    sc = Standardizer().fit(X[tr])
    split = lambda idx: (torch.from_numpy(sc.transform(X[idx])), torch.from_numpy(y[idx]))
    return split(tr), split(va), split(te)


class ClaimMLP(nn.Module):
    def __init__(self, d_in, hidden, dropout):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.layers(x).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return F.binary_cross_entropy_with_logits(model(x), y.float())


def make_optimizer(params, hp=HPARAMS):
    return torch.optim.AdamW(params, lr=hp["lr"], weight_decay=hp["weight_decay"])


def make_target():
    hp = dict(HPARAMS)
    torch.manual_seed(hp["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (Xtr, ytr), _, _ = build_splits(hp, tmp)
    model = ClaimMLP(Xtr.shape[1], hp["hidden"], hp["dropout"])
    bs = hp["batch_size"]
    data = [(Xtr[i * bs:(i + 1) * bs], ytr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters(), hp), "num_classes": 2, "task": "classification"}


@torch.no_grad()
def run_eval(model, X, y):
    model.eval()
    logits = model(X)
    loss = F.binary_cross_entropy_with_logits(logits, y.float()).item()
    acc = ((logits > 0).long() == y).float().mean().item()
    model.train()
    return loss, acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max_epochs", type=int, default=HPARAMS["max_epochs"])
    ap.add_argument("--lr", type=float, default=HPARAMS["lr"])
    ap.add_argument("--patience", type=int, default=HPARAMS["patience"])
    cli = ap.parse_args()
    hp = dict(HPARAMS, max_epochs=cli.max_epochs, lr=cli.lr, patience=cli.patience)

    torch.manual_seed(hp["seed"])
    np.random.seed(hp["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (Xtr, ytr), (Xva, yva), (Xte, yte) = build_splits(hp, tmp)

    model = ClaimMLP(Xtr.shape[1], hp["hidden"], hp["dropout"])
    opt = make_optimizer(model.parameters(), hp)
    steps_per_epoch = math.ceil(len(Xtr) / hp["batch_size"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=hp["max_epochs"] * steps_per_epoch)
    n_params = sum(p.numel() for p in model.parameters())

    print("GPU available: False, used: False")
    print("  | Name   | Type       | Params")
    print("---------------------------------------")
    print(f"0 | layers | Sequential | {n_params}")
    print(f"{n_params}     Trainable params")
    print(f"train={len(Xtr)} val={len(Xva)} test={len(Xte)}  positive rate={ytr.float().mean():.3f}")

    g = torch.Generator().manual_seed(hp["seed"])
    best_loss, best_state, best_epoch, bad = float("inf"), None, -1, 0
    for epoch in range(hp["max_epochs"]):
        t0 = time.time()
        perm = torch.randperm(len(Xtr), generator=g)
        tot, n = 0.0, 0
        for i in range(0, len(Xtr), hp["batch_size"]):
            idx = perm[i:i + hp["batch_size"]]
            loss = loss_fn(model, (Xtr[idx], ytr[idx]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item() * len(idx)
            n += len(idx)
        val_loss, val_acc = run_eval(model, Xva, yva)
        it_s = steps_per_epoch / max(time.time() - t0, 1e-6)
        print(f"Epoch {epoch}: 100%|##########| {steps_per_epoch}/{steps_per_epoch} [00:00, {it_s:.2f}it/s, "
              f"train_loss={tot / n:.4f}, val_loss={val_loss:.4f}, val_acc={val_acc:.4f}]")
        if val_loss < best_loss - 1e-4:
            print(f"Epoch {epoch}, global step {(epoch + 1) * steps_per_epoch}: 'val_loss' reached {val_loss:.5f} "
                  f"(best {val_loss:.5f}), saving model to 'checkpoints/best.ckpt' as top 1")
            best_loss, best_epoch, bad = val_loss, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad += 1
            if bad >= hp["patience"]:
                print(f"Monitored metric val_loss did not improve in the last {bad} records. "
                      f"Best score: {best_loss:.3f}. Signaling Trainer to stop.")
                break

    model.load_state_dict(best_state)
    print(f"Restoring states from the checkpoint path at checkpoints/best.ckpt (epoch {best_epoch})")
    test_loss, test_acc = run_eval(model, Xte, yte)
    print("-" * 50)
    print(f"       Test metric             DataLoader 0")
    print("-" * 50)
    print(f"        test_acc            {test_acc:.4f}")
    print(f"        test_loss           {test_loss:.4f}")
    print("-" * 50)


if __name__ == "__main__":
    main()

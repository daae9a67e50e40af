"""Fine-tune a pretrained vibration encoder to predict unplanned downtime.

The encoder (1D CNN over 3-axis accelerometer windows) was pretrained on the
fault-type classification task; if its checkpoint is not on disk it is rebuilt
at start-up from the same recipe. For fine-tuning the stem is frozen (kept in
eval mode), the last conv block is trainable, and a new binary head predicts
"unplanned downtime within 30 days" -- a label that is mostly chance given a
single vibration snapshot. Logs follow the HF Trainer format.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 2024
HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "checkpoints", "vib_encoder_pretrained.pt")

FS = 128          # samples per window
N_CH = 3          # x/y/z accelerometer
FAULTS = ["normal", "imbalance", "misalignment", "bearing"]

# fine-tuning hyper-parameters (TrainingArguments-like)
ARGS = dict(
    learning_rate=1e-3,
    backbone_learning_rate=2e-4,
    weight_decay=0.01,
    per_device_train_batch_size=64,
    per_device_eval_batch_size=256,
    num_train_epochs=10,
    warmup_ratio=0.1,
    logging_steps=50,
    max_grad_norm=1.0,
)


# ----------------------------------------------------------------------------- data
def simulate_windows(n, rng):
    """Vibration windows with a latent fault type and a latent severity."""
    t = np.arange(FS) / FS
    fault = rng.integers(0, len(FAULTS), n)
    severity = rng.gamma(2.0, 0.5, n)                 # latent wear level
    rpm_f = rng.uniform(4.0, 7.0, n)                  # shaft frequency (cycles / window)
    phase = rng.uniform(0, 2 * np.pi, (n, N_CH))
    x = np.zeros((n, N_CH, FS), dtype=np.float32)
    base = np.sin(2 * np.pi * rpm_f[:, None, None] * t[None, None, :] + phase[:, :, None])
    x += 0.8 * base
    amp = (0.4 + 0.6 * severity)[:, None, None]
    # imbalance: strong 1x on the radial axes
    m = fault == 1
    x[m, :2] += amp[m] * 1.2 * base[m, :2]
    # misalignment: 2x harmonic, axial axis
    m = fault == 2
    x[m] += amp[m] * np.sin(2 * np.pi * 2 * rpm_f[m, None, None] * t + phase[m, :, None]) * np.array([0.4, 0.4, 1.0])[:, None]
    # bearing: high-frequency bursts, amplitude-modulated at the shaft rate
    m = fault == 3
    carrier = np.sin(2 * np.pi * 37 * t + phase[m, :, None])
    env = 0.5 * (1 + np.sin(2 * np.pi * rpm_f[m, None, None] * t))
    x[m] += amp[m] * carrier * env
    x += rng.normal(0, 0.6, x.shape).astype(np.float32)
    return x.astype(np.float32), fault, severity


def pretrain_corpus(n=6000, seed=SEED):
    rng = np.random.default_rng(seed)
    x, fault, _ = simulate_windows(n, rng)
    return torch.from_numpy(x), torch.from_numpy(fault).long()


def downtime_dataset(n_train=16000, n_val=4000, seed=SEED + 1):
    """Target fleet: downtime within 30 days depends weakly on wear + fault type, mostly on chance."""
    rng = np.random.default_rng(seed)
    n = n_train + n_val
    x, fault, severity = simulate_windows(n, rng)
    z = (severity - severity.mean()) / severity.std()
    logit = -1.8 + 0.6 * z + 0.25 * (fault == 3) + 0.15 * (fault == 2)
    y = rng.binomial(1, 1 / (1 + np.exp(-logit))).astype(np.float32)
    # per-channel standardisation with train statistics
    mu = x[:n_train].mean(axis=(0, 2), keepdims=True)
    sd = x[:n_train].std(axis=(0, 2), keepdims=True)
    x = (x - mu) / sd
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    return (xt[:n_train], yt[:n_train]), (xt[n_train:], yt[n_train:])


# ----------------------------------------------------------------------------- model
def conv_block(c_in, c_out, k, s):
    return nn.Sequential(nn.Conv1d(c_in, c_out, k, stride=s, padding=k // 2, bias=False),
                         nn.BatchNorm1d(c_out), nn.ReLU(inplace=True))


class VibEncoder(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.stem = nn.Sequential(conv_block(N_CH, width, 7, 2), conv_block(width, 2 * width, 5, 2))
        self.block3 = conv_block(2 * width, 2 * width, 5, 2)
        self.out_dim = 2 * width

    def forward(self, x):
        h = self.block3(self.stem(x))
        return h.mean(dim=-1)


def pretrain_encoder(path=CKPT_PATH, epochs=3):
    """Recreates the upstream fault-classification checkpoint (deterministic recipe)."""
    torch.manual_seed(SEED)
    x, y = pretrain_corpus()
    x = (x - x.mean(dim=(0, 2), keepdim=True)) / x.std(dim=(0, 2), keepdim=True)
    enc = VibEncoder()
    clf = nn.Linear(enc.out_dim, len(FAULTS))
    opt = torch.optim.Adam(list(enc.parameters()) + list(clf.parameters()), lr=3e-3)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True,
                        generator=torch.Generator().manual_seed(SEED))
    for ep in range(epochs):
        correct = 0
        for xb, yb in loader:
            logits = clf(enc(xb))
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += (logits.argmax(-1) == yb).sum().item()
        print(f"[pretrain] epoch {ep + 1}/{epochs} fault-type acc {correct / len(y):.3f}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(enc.state_dict(), path)


def load_pretrained_encoder(path=CKPT_PATH):
    if not os.path.exists(path):
        print(f"checkpoint {os.path.relpath(path, HERE)} not found, rebuilding it")
        pretrain_encoder(path)
    enc = VibEncoder()
    enc.load_state_dict(torch.load(path, map_location="cpu"))
    return enc


class DowntimeClassifier(nn.Module):
    def __init__(self, encoder, p_drop=0.1):
        super().__init__()
        self.encoder = encoder
        for p in self.encoder.stem.parameters():
            p.requires_grad_(False)
        self.head = nn.Sequential(nn.Dropout(p_drop), nn.Linear(encoder.out_dim, 1))
        self.train()

    def train(self, mode=True):
        super().train(mode)
        self.encoder.stem.eval()   # frozen stem keeps its pretrained BN statistics
        return self

    def forward(self, x):
        return self.head(self.encoder(x)).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return F.binary_cross_entropy_with_logits(model(x), y)


def build_optimizer(model):
    decay, no_decay = [], []
    for n, p in model.head.named_parameters():
        (no_decay if n.endswith("bias") else decay).append(p)
    bb = [p for p in model.encoder.parameters() if p.requires_grad]
    return torch.optim.AdamW([
        {"params": decay, "lr": ARGS["learning_rate"], "weight_decay": ARGS["weight_decay"]},
        {"params": no_decay, "lr": ARGS["learning_rate"], "weight_decay": 0.0},
        {"params": bb, "lr": ARGS["backbone_learning_rate"], "weight_decay": ARGS["weight_decay"]},
    ])


def linear_schedule_with_warmup(optimizer, warmup, total):
    def lr_lambda(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def build_loaders():
    (xtr, ytr), (xva, yva) = downtime_dataset()
    train_loader = DataLoader(TensorDataset(xtr, ytr), batch_size=ARGS["per_device_train_batch_size"],
                              shuffle=True, generator=torch.Generator().manual_seed(SEED))
    val_loader = DataLoader(TensorDataset(xva, yva), batch_size=ARGS["per_device_eval_batch_size"])
    return train_loader, val_loader


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    encoder = load_pretrained_encoder()
    torch.manual_seed(SEED)  # head init independent of whether the checkpoint was rebuilt
    model = DowntimeClassifier(encoder)
    return {"model": model, "data": train_loader, "val_data": val_loader, "loss_fn": loss_fn,
            "optimizer": build_optimizer(model), "num_classes": 2, "task": "classification"}


# ----------------------------------------------------------------------------- eval
def auc_score(y, s):
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    n_pos = y.sum()
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (len(y) - n_pos)))


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    t0 = time.time()
    logits, ys = [], []
    for xb, yb in loader:
        logits.append(model(xb))
        ys.append(yb)
    model.train()
    logits, y = torch.cat(logits), torch.cat(ys)
    loss = F.binary_cross_entropy_with_logits(logits, y).item()
    auc = auc_score(y.numpy(), logits.numpy())
    dt = time.time() - t0
    return {"eval_loss": round(loss, 4), "eval_auc": round(auc, 4), "eval_runtime": round(dt, 4),
            "eval_samples_per_second": round(len(y) / dt, 3)}


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    encoder = load_pretrained_encoder()
    torch.manual_seed(SEED)  # head init independent of whether the checkpoint was rebuilt
    model = DowntimeClassifier(encoder)
    optimizer = build_optimizer(model)
    steps_per_epoch = len(train_loader)
    total_steps = steps_per_epoch * ARGS["num_train_epochs"]
    scheduler = linear_schedule_with_warmup(optimizer, int(ARGS["warmup_ratio"] * total_steps), total_steps)

    n_train = len(train_loader.dataset)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print("***** Running training *****")
    print(f"  Num examples = {n_train:,}")
    print(f"  Num Epochs = {ARGS['num_train_epochs']}")
    print(f"  Instantaneous batch size per device = {ARGS['per_device_train_batch_size']}")
    print(f"  Total optimization steps = {total_steps:,}")
    print(f"  Number of trainable parameters = {n_trainable:,}")

    model.train()
    t_start = time.time()
    step, running, running_n, total_loss = 0, 0.0, 0, 0.0
    for epoch in range(ARGS["num_train_epochs"]):
        for batch in train_loader:
            loss = loss_fn(model, batch)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), ARGS["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            running += loss.item()
            running_n += 1
            total_loss += loss.item()
            if step % ARGS["logging_steps"] == 0:
                print({"loss": round(running / running_n, 4), "grad_norm": round(float(gnorm), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, running_n = 0.0, 0
        metrics = evaluate(model, val_loader)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)

    runtime = time.time() - t_start
    print(f"\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n")
    print({"train_runtime": round(runtime, 4), "train_samples_per_second": round(n_train * ARGS["num_train_epochs"] / runtime, 3),
           "train_steps_per_second": round(total_steps / runtime, 3), "train_loss": round(total_loss / total_steps, 4),
           "epoch": float(ARGS["num_train_epochs"])})

    # reference: constant predictor at the training base rate
    y_tr = train_loader.dataset.tensors[1]
    y_va = val_loader.dataset.tensors[1]
    p0 = y_tr.mean().item()
    base = F.binary_cross_entropy(torch.full_like(y_va, p0), y_va).item()
    print(f"base rate train={p0:.4f} val={y_va.mean().item():.4f} | constant-predictor eval_loss={base:.4f} eval_auc=0.5")

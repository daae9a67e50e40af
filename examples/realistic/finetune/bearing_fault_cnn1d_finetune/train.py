"""Bearing fault classification from accelerometer windows.

Stage 0 (cached): self-supervised masked-segment reconstruction on unlabeled
vibration windows -> encoder_pretrained.pt
Stage 1: fine-tune a classifier head (+ top encoder block) on the small,
imbalanced labeled set.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader, WeightedRandomSampler

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(RUN_DIR, "encoder_pretrained.pt")

CLASSES = ["normal", "inner_race", "outer_race", "ball", "cage", "misalignment"]
CLASS_PRIOR = [0.50, 0.14, 0.12, 0.09, 0.08, 0.07]

CFG = dict(
    seed=1234,
    win_len=256,
    n_unlabeled=3000,
    pretrain_steps=200,
    pretrain_lr=2e-3,
    n_labeled=1400,
    val_frac=0.3,
    batch_size=64,
    epochs=16,
    lr=2e-3,
    weight_decay=1e-4,
    log_every=20,
)


def seed_everything(seed):
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------
# synthetic accelerometer data
# ----------------------------------------------------------------------------
def _impulse_train(rng, n, period, amp, f_res, decay, jitter=0.02):
    sig = np.zeros(n)
    k = rng.uniform(0, period)
    ring_len = 48
    tt = np.arange(ring_len)
    ring = np.exp(-decay * tt) * np.sin(2 * np.pi * f_res * tt)
    while k < n:
        i = int(k)
        m = min(n - i, ring_len)
        sig[i:i + m] += amp * rng.uniform(0.7, 1.3) * ring[:m]
        k += period * rng.uniform(1 - jitter, 1 + jitter)
    return sig


def synth_window(rng, label, n):
    t = np.arange(n)
    f_shaft = rng.uniform(0.008, 0.016)       # cycles / sample
    ph = rng.uniform(0, 2 * np.pi, size=3)
    x = 0.6 * np.sin(2 * np.pi * f_shaft * t + ph[0])
    x += 0.12 * np.sin(2 * np.pi * 2 * f_shaft * t + ph[1])
    f_res = rng.uniform(0.15, 0.32)            # structural resonance
    decay = rng.uniform(0.06, 0.12)
    if label == 1:    # inner race: BPFI ~ 5.4x, amplitude modulated by shaft
        imp = _impulse_train(rng, n, 1.0 / (5.4 * f_shaft), 0.9, f_res, decay)
        x += imp * (1.0 + 0.6 * np.sin(2 * np.pi * f_shaft * t + ph[2]))
    elif label == 2:  # outer race: BPFO ~ 3.6x
        x += _impulse_train(rng, n, 1.0 / (3.6 * f_shaft), 0.9, f_res, decay)
    elif label == 3:  # ball spin ~ 2.3x, weaker and irregular
        x += _impulse_train(rng, n, 1.0 / (2.3 * f_shaft), 0.7, f_res, decay, jitter=0.08)
    elif label == 4:  # cage: slow modulation of the whole signal
        x *= 1.0 + 0.7 * np.sin(2 * np.pi * 0.4 * f_shaft * t + ph[2])
        x += 0.25 * np.sin(2 * np.pi * 0.4 * f_shaft * t)
    elif label == 5:  # misalignment: strong 2x / 3x harmonics
        x += 0.45 * np.sin(2 * np.pi * 2 * f_shaft * t + ph[2])
        x += 0.25 * np.sin(2 * np.pi * 3 * f_shaft * t + ph[1])
    x += rng.normal(0, 0.35, n)
    x *= rng.uniform(0.7, 1.4)                 # sensor gain / mounting
    return x.astype(np.float32)


def make_split(rng, n, prior, win_len):
    labels = rng.choice(len(prior), size=n, p=prior)
    X = np.stack([synth_window(rng, int(y), win_len) for y in labels])
    return X, labels.astype(np.int64)


class VibrationDataset(Dataset):
    def __init__(self, X, y, mean, std, augment=False, seed=0):
        self.X = X
        self.y = y
        self.mean = mean
        self.std = std
        self.augment = augment
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = (self.X[i] - self.mean) / self.std
        if self.augment:
            x = np.roll(x, self.rng.integers(0, len(x)))
            x = x * self.rng.uniform(0.9, 1.1)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None], int(self.y[i])


def build_data(cfg):
    rng = np.random.default_rng(cfg["seed"])
    X, y = make_split(rng, cfg["n_labeled"], CLASS_PRIOR, cfg["win_len"])
    perm = rng.permutation(len(y))
    n_val = int(len(y) * cfg["val_frac"])
    val_idx, tr_idx = perm[:n_val], perm[n_val:]
    X_tr, y_tr, X_va, y_va = X[tr_idx], y[tr_idx], X[val_idx], y[val_idx]
    mean, std = float(X_tr.mean()), float(X_tr.std())

    train_ds = VibrationDataset(X_tr, y_tr, mean, std, augment=True, seed=cfg["seed"])
    val_ds = VibrationDataset(X_va, y_va, mean, std, augment=False)

    # rebalance: healthy windows dominate the recordings
    class_counts = np.bincount(y_tr, minlength=len(CLASSES))
    class_weights = 1.0 / class_counts
    sampler = WeightedRandomSampler(
        weights=torch.as_tensor(class_weights, dtype=torch.double),
        num_samples=len(train_ds),
        replacement=True,
        generator=torch.Generator().manual_seed(cfg["seed"]),
    )
    train_loader = DataLoader(train_ds, batch_size=cfg["batch_size"], sampler=sampler, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_loader, val_loader, (mean, std)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_block(cin, cout, k, s):
    return nn.Sequential(nn.Conv1d(cin, cout, k, stride=s, padding=k // 2, bias=False),
                         nn.BatchNorm1d(cout), nn.GELU())


class VibEncoder(nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.blocks = nn.Sequential(
            conv_block(1, 32, 9, 2),
            conv_block(32, width, 7, 2),
            conv_block(width, width, 5, 2),
            conv_block(width, 96, 5, 1),
        )
        self.out_dim = 96

    def forward(self, x):
        return self.blocks(x)       # (B, 96, T/8)


class MaskedReconstructor(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(96, 64, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(64, 32, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(32, 1, 4, stride=2, padding=1),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


class FaultClassifier(nn.Module):
    def __init__(self, encoder, n_classes, n_frozen_blocks=3):
        super().__init__()
        self.encoder = encoder
        self.n_frozen = n_frozen_blocks
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(2 * encoder.out_dim, n_classes))
        for blk in self.encoder.blocks[: self.n_frozen]:
            for p in blk.parameters():
                p.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        for blk in self.encoder.blocks[: self.n_frozen]:
            blk.eval()          # keep pretrained BN statistics for frozen blocks
        return self

    def forward(self, x):
        h = self.encoder(x)
        feat = torch.cat([h.mean(-1), h.amax(-1)], dim=1)
        return self.head(feat)


# ----------------------------------------------------------------------------
# pretraining (cached)
# ----------------------------------------------------------------------------
def pretrain_encoder(cfg):
    print(f"[pretrain] no checkpoint at {CKPT_PATH}, running masked reconstruction")
    t0 = time.time()
    rng = np.random.default_rng(cfg["seed"] + 99)
    X, _ = make_split(rng, cfg["n_unlabeled"], CLASS_PRIOR, cfg["win_len"])
    X = (X - X.mean()) / X.std()
    X = torch.from_numpy(X)[:, None]
    torch.manual_seed(cfg["seed"] + 99)
    model = MaskedReconstructor(VibEncoder())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["pretrain_lr"], weight_decay=1e-4)
    n, L = X.shape[0], X.shape[-1]
    for step in range(1, cfg["pretrain_steps"] + 1):
        idx = torch.randint(0, n, (64,))
        x = X[idx]
        mask = torch.zeros_like(x)
        for _ in range(4):
            s = torch.randint(0, L - 32, (x.shape[0],))
            ar = torch.arange(L)[None, :]
            mask[:, 0] += ((ar >= s[:, None]) & (ar < s[:, None] + 32)).float()
        mask = mask.clamp(max=1.0)
        recon = model(x * (1 - mask))
        loss = (((recon - x) ** 2) * mask).sum() / mask.sum().clamp(min=1) + 0.1 * F.mse_loss(recon, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == 1:
            print(f"[pretrain] step {step:4d} recon_loss {loss.item():.4f}")
    torch.save(model.encoder.state_dict(), CKPT_PATH)
    print(f"[pretrain] saved encoder to {CKPT_PATH} ({time.time() - t0:.1f}s)")


def build_model(cfg):
    if not os.path.exists(CKPT_PATH):
        pretrain_encoder(cfg)
    encoder = VibEncoder()
    encoder.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    torch.manual_seed(cfg["seed"])
    return FaultClassifier(encoder, len(CLASSES))


def make_optimizer_fn(cfg):
    def make_optimizer(params):
        return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    return make_optimizer


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    preds, ys, tot_loss, n = [], [], 0.0, 0
    for x, y in loader:
        logits = model(x)
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        n += len(y)
        preds.append(logits.argmax(1))
        ys.append(y)
    p, y = torch.cat(preds).numpy(), torch.cat(ys).numpy()
    f1s = []
    for c in range(len(CLASSES)):
        tp = np.sum((p == c) & (y == c))
        fp = np.sum((p == c) & (y != c))
        fn = np.sum((p != c) & (y == c))
        f1s.append(2 * tp / max(2 * tp + fp + fn, 1))
    model.train()
    return tot_loss / n, float((p == y).mean()), float(np.mean(f1s))


def make_target():
    torch.set_num_threads(1)
    cfg = dict(CFG)
    seed_everything(cfg["seed"])
    train_loader, _, _ = build_data(cfg)
    model = build_model(cfg)
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 3:
            break
    return dict(model=model, data=data, loss_fn=compute_loss,
                make_optimizer=make_optimizer_fn(cfg),
                task="classification", num_classes=len(CLASSES))


def main():
    cfg = dict(CFG)
    torch.set_num_threads(1)
    seed_everything(cfg["seed"])
    t0 = time.time()
    train_loader, val_loader, _ = build_data(cfg)
    model = build_model(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in params)
    n_total = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {n_train} / {n_total}")
    optimizer = make_optimizer_fn(cfg)(params)
    total_steps = cfg["epochs"] * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=cfg["lr"], total_steps=total_steps,
                                                    pct_start=0.1)
    model.train()
    step = 0
    for epoch in range(1, cfg["epochs"] + 1):
        run_loss, run_n = 0.0, 0
        for batch in train_loader:
            loss = compute_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            run_loss += loss.item()
            run_n += 1
            if step % cfg["log_every"] == 0:
                print(f"step {step:4d} | epoch {epoch} | loss {loss.item():.4f} | lr {scheduler.get_last_lr()[0]:.2e}")
        val_loss, val_acc, val_f1 = evaluate(model, val_loader)
        print(f"Epoch {epoch}/{cfg['epochs']} - train_loss: {run_loss / run_n:.4f} - val_loss: {val_loss:.4f}"
              f" - val_acc: {val_acc:.4f} - val_macro_f1: {val_f1:.4f}")
    print(f"final val_acc {val_acc:.4f} val_macro_f1 {val_f1:.4f} | wall {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

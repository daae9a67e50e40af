"""Human-activity recognition from 3-axis accelerometer windows.

1D-CNN over 128-sample windows (50 Hz, ~2.5 s), 6 activity classes.
Micro-batches of 32 windows, 8 accumulation steps -> effective batch 256.
SGD + Nesterov, one-cycle style LR (linear warmup, cosine down), bf16 autocast.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
FS = 50.0
WIN = 128
ACTIVITIES = ["walking", "upstairs", "downstairs", "sitting", "standing", "running"]
N_CLASSES = len(ACTIVITIES)
N_TRAIN_SUBJECTS = 24
N_VAL_SUBJECTS = 6
WINDOWS_PER_SUBJECT_ACT = 26

MICRO_BS = 32
ACCUM_STEPS = 8
EPOCHS = 8
PEAK_LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
WARMUP_FRAC = 0.15
CLIP = 2.0

torch.set_num_threads(1)


# ------------------------------------------------------------------ data
def synth_window(rng, act, subj):
    """One window of (3, WIN) accelerometer readings in g."""
    t = np.arange(WIN) / FS
    cadence = subj["cadence"]
    phase = rng.uniform(0, 2 * np.pi)
    tilt = subj["tilt"] + rng.normal(0, 0.05, size=3)
    grav = np.array([np.sin(tilt[0]), np.sin(tilt[1]), np.cos(tilt[0])])[:, None]
    noise = rng.normal(0, 0.03, size=(3, WIN))
    if act in ("walking", "upstairs", "downstairs", "running"):
        f = cadence * {"walking": 1.0, "upstairs": 0.85, "downstairs": 1.1, "running": 1.6}[act]
        amp = subj["amp"] * {"walking": 0.35, "upstairs": 0.3, "downstairs": 0.45, "running": 0.9}[act]
        vert = amp * np.sin(2 * np.pi * f * t + phase) + 0.4 * amp * np.sin(4 * np.pi * f * t + 2 * phase)
        lat = 0.5 * amp * np.sin(np.pi * f * t + phase)
        fwd = 0.3 * amp * np.sin(2 * np.pi * f * t + phase + 0.8)
        if act == "upstairs":
            vert = vert + 0.12 * amp * np.sign(np.sin(2 * np.pi * f * t + phase))
            fwd = fwd + 0.08
        elif act == "downstairs":
            vert = vert + 0.15 * amp * np.abs(np.sin(2 * np.pi * f * t + phase)) ** 3
            fwd = fwd - 0.06
        sig = np.stack([fwd, lat, vert]) + grav
        noise *= 2.5
    elif act == "sitting":
        g2 = np.array([np.sin(tilt[0] + 0.5), np.sin(tilt[1]), np.cos(tilt[0] + 0.5)])[:, None]
        sig = np.repeat(g2, WIN, axis=1) + 0.02 * rng.normal(size=(3, 1))
    else:  # standing
        sway = 0.015 * np.sin(2 * np.pi * 0.3 * t + phase)
        sig = np.repeat(grav, WIN, axis=1) + sway[None, :]
    return (sig + noise).astype(np.float32)


def generate_split(subject_ids, seed):
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for s in subject_ids:
        srng = np.random.default_rng(1000 + s)
        subj = {
            "cadence": srng.uniform(1.6, 2.2),
            "amp": srng.uniform(0.7, 1.3),
            "tilt": srng.normal(0, 0.15, size=3),
        }
        for a, act in enumerate(ACTIVITIES):
            for _ in range(WINDOWS_PER_SUBJECT_ACT):
                xs.append(synth_window(rng, act, subj))
                ys.append(a)
    return np.stack(xs), np.array(ys, dtype=np.int64)


def build_datasets():
    x_tr, y_tr = generate_split(range(N_TRAIN_SUBJECTS), SEED)
    x_va, y_va = generate_split(range(N_TRAIN_SUBJECTS, N_TRAIN_SUBJECTS + N_VAL_SUBJECTS), SEED + 1)
    # per-channel standardisation with train statistics
    mu = x_tr.mean(axis=(0, 2), keepdims=True)
    sd = x_tr.std(axis=(0, 2), keepdims=True) + 1e-6
    x_tr = (x_tr - mu) / sd
    x_va = (x_va - mu) / sd
    return (torch.from_numpy(x_tr), torch.from_numpy(y_tr)), (torch.from_numpy(x_va), torch.from_numpy(y_va))


def micro_batches(ds, bs, shuffle, gen=None):
    x, y = ds
    n = x.shape[0]
    order = torch.randperm(n, generator=gen) if shuffle else torch.arange(n)
    stop = n - bs + 1 if shuffle else n
    for i in range(0, stop, bs):
        j = order[i:i + bs]
        yield x[j], y[j]


# ------------------------------------------------------------------ model
def conv_block(c_in, c_out, k, stride=1):
    return nn.Sequential(
        nn.Conv1d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False),
        nn.BatchNorm1d(c_out),
        nn.ReLU(inplace=True),
    )


class HARNet(nn.Module):
    def __init__(self, n_classes=N_CLASSES, width=32):
        super().__init__()
        self.features = nn.Sequential(
            conv_block(3, width, 7),
            conv_block(width, width, 5, stride=2),
            conv_block(width, 2 * width, 5),
            conv_block(2 * width, 2 * width, 3, stride=2),
            conv_block(2 * width, 2 * width, 3),
        )
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(0.2),
            nn.Linear(2 * width, n_classes),
            nn.Softmax(dim=-1),
        )

    def forward(self, x):
        return self.head(self.pool(self.features(x)))


def compute_loss(model, batch):
    x, y = batch
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = model(x)
    return F.cross_entropy(out.float(), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=PEAK_LR, momentum=MOMENTUM, nesterov=True,
                           weight_decay=WEIGHT_DECAY)


def lr_lambda_factory(total_steps):
    warm = max(1, int(WARMUP_FRAC * total_steps))

    def f(step):
        if step < warm:
            return (step + 1) / warm
        p = (step - warm) / max(1, total_steps - warm)
        return 0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * p))
    return f


@torch.no_grad()
def evaluate(model, ds):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for x, y in micro_batches(ds, 256, shuffle=False):
        loss = compute_loss(model, (x, y))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            pred = model(x).argmax(-1)
        loss_sum += loss.item() * y.numel()
        correct += (pred == y).sum().item()
        n += y.numel()
    model.train()
    return loss_sum / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_ds, _ = build_datasets()
    gen = torch.Generator().manual_seed(SEED)
    it = micro_batches(train_ds, MICRO_BS, shuffle=True, gen=gen)
    return {
        "model": HARNet(),
        "data": [next(it) for _ in range(ACCUM_STEPS)],
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


# ------------------------------------------------------------------ train
def main():
    torch.manual_seed(SEED)
    t_start = time.time()
    train_ds, val_ds = build_datasets()
    model = HARNet()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = (train_ds[0].shape[0] // MICRO_BS) // ACCUM_STEPS
    total_steps = steps_per_epoch * EPOCHS
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda_factory(total_steps))
    gen = torch.Generator().manual_seed(SEED)

    print(f"[data] train windows: {len(train_ds[1])} ({N_TRAIN_SUBJECTS} subjects) | "
          f"val windows: {len(val_ds[1])} ({N_VAL_SUBJECTS} held-out subjects)")
    print(f"[cfg] micro_bs={MICRO_BS} x accum={ACCUM_STEPS} = {MICRO_BS * ACCUM_STEPS} | "
          f"{steps_per_epoch} opt steps/epoch | peak_lr={PEAK_LR}")

    global_step = 0
    model.train()
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        optimizer.zero_grad(set_to_none=True)
        ep_loss, ep_n, n_micro = 0.0, 0, 0
        norms = []
        for x, y in micro_batches(train_ds, MICRO_BS, shuffle=True, gen=gen):
            loss = compute_loss(model, (x, y))
            (loss / ACCUM_STEPS).backward()
            ep_loss += loss.item()
            ep_n += 1
            n_micro += 1
            if n_micro % ACCUM_STEPS == 0:
                norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item())
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                global_step += 1
        # any leftover micro-batches (< ACCUM_STEPS) are dropped with the zero_grad above

        val_loss, val_acc = evaluate(model, val_ds)
        print(f"Epoch {epoch}/{EPOCHS} - {time.time() - t0:.1f}s - loss: {ep_loss / ep_n:.4f} - "
              f"grad_norm: {np.mean(norms):.3f} - lr: {scheduler.get_last_lr()[0]:.4f} - "
              f"val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f}")
    print(f"done in {time.time() - t_start:.1f}s, {global_step} optimizer steps")


if __name__ == "__main__":
    main()

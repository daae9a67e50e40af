# Tiny ResNet (BN) for classifying synthetic bird/insect call spectrograms.
# Log-mel-ish 1x32x64 inputs, 5 call types. Training uses mixup (alpha=0.4),
# random circular time shift and SpecAugment-style time/freq masking.
# SGD + nesterov, linear warmup then cosine decay (per step).
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_MELS, N_FRAMES = 32, 64
CALLS = ["up_chirp", "down_chirp", "harmonic_tone", "click_train", "buzz_band"]
NUM_CLASSES = len(CALLS)

SEED = 2024
N_TRAIN, N_VAL = 1536, 500
BATCH_SIZE = 64
EPOCHS = 10
BASE_LR = 0.1
WEIGHT_DECAY = 5e-4
WARMUP_STEPS = 48
MIXUP_ALPHA = 0.4


def synth_spectrogram(label, rng):
    f = np.arange(N_MELS)[:, None].astype(np.float32)
    t = np.arange(N_FRAMES)[None, :].astype(np.float32)
    spec = rng.normal(0.0, 0.6, (N_MELS, N_FRAMES)).astype(np.float32)
    spec += np.linspace(0.8, 0.0, N_MELS)[:, None]          # pinkish background
    t0 = rng.uniform(0, N_FRAMES - 24)
    dur = rng.uniform(12, 24)
    on = ((t >= t0) & (t < t0 + dur)).astype(np.float32)
    amp = rng.uniform(1.2, 2.5)
    if label in (0, 1):
        f_lo, f_hi = rng.uniform(4, 10), rng.uniform(20, 28)
        frac = np.clip((t - t0) / dur, 0, 1)
        track = f_lo + (f_hi - f_lo) * (frac if label == 0 else 1 - frac)
        spec += amp * on * np.exp(-0.5 * ((f - track) / 1.2) ** 2)
    elif label == 2:
        f0 = rng.uniform(4, 9)
        for h in (1, 2, 3):
            spec += amp / h * on * np.exp(-0.5 * ((f - h * f0) / 1.0) ** 2)
    elif label == 3:
        period = rng.integers(4, 8)
        clicks = (((t - t0) % period) < 1.0) * on
        spec += amp * clicks * np.exp(-0.5 * ((f - rng.uniform(10, 22)) / 8.0) ** 2)
    else:
        fc, bw = rng.uniform(8, 24), rng.uniform(3, 6)
        spec += 0.8 * amp * on * (np.abs(f - fc) < bw) * (1 + 0.3 * rng.normal(size=(N_MELS, N_FRAMES)))
    return spec.astype(np.float32)


def build_dataset(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, NUM_CLASSES, n)
    x = np.stack([synth_spectrogram(int(c), rng) for c in y])[:, None]
    return torch.from_numpy(x), torch.from_numpy(y).long()


def spec_augment(x, gen):
    n = x.shape[0]
    shift = torch.randint(0, N_FRAMES, (n,), generator=gen)
    x = torch.stack([torch.roll(x[i], int(shift[i]), dims=-1) for i in range(n)])
    fill = x.mean()
    for i in range(n):
        fw = int(torch.randint(0, 5, (1,), generator=gen))
        f0 = int(torch.randint(0, N_MELS - fw + 1, (1,), generator=gen))
        tw = int(torch.randint(0, 9, (1,), generator=gen))
        s0 = int(torch.randint(0, N_FRAMES - tw + 1, (1,), generator=gen))
        x[i, :, f0:f0 + fw, :] = fill
        x[i, :, :, s0:s0 + tw] = fill
    return x


def mixup(x, y, gen, alpha=MIXUP_ALPHA):
    lam = float(torch.distributions.Beta(alpha, alpha).sample())
    perm = torch.randperm(x.shape[0], generator=gen)
    return lam * x + (1 - lam) * x[perm], y, y[perm], lam


def train_batches(x, y, gen):
    perm = torch.randperm(len(x), generator=gen)
    for i in range(0, len(x) - BATCH_SIZE + 1, BATCH_SIZE):
        idx = perm[i:i + BATCH_SIZE]
        xb = spec_augment(x[idx].clone(), gen)
        yield mixup(xb, y[idx], gen)


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.short = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.short = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))


class CallResNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(16, 16, 2)    # 16x32
        self.layer2 = BasicBlock(16, 32, 2)    # 8x16
        self.layer3 = BasicBlock(32, 64, 2)    # 4x8
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(x.mean(dim=(2, 3)))


def loss_fn(model, batch):
    x, y_a, y_b, lam = batch
    logits = model(x)
    return lam * F.cross_entropy(logits, y_a) + (1 - lam) * F.cross_entropy(logits, y_b)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=BASE_LR, momentum=0.9, nesterov=True, weight_decay=WEIGHT_DECAY)


def lr_at(step, total):
    if step < WARMUP_STEPS:
        return BASE_LR * (step + 1) / WARMUP_STEPS
    p = (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS)
    return BASE_LR * 0.5 * (1 + math.cos(math.pi * p))


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = torch.cat([model(x[i:i + 250]) for i in range(0, len(x), 250)])
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def make_target():
    torch.manual_seed(SEED)
    x, y = build_dataset(320, SEED)
    gen = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(4), train_batches(x, y, gen))]
    return {"model": CallResNet(), "data": data, "loss_fn": loss_fn, "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    t_start = time.time()
    x_tr, y_tr = build_dataset(N_TRAIN, SEED)
    x_va, y_va = build_dataset(N_VAL, SEED + 1)
    model = CallResNet()
    opt = make_optimizer(model.parameters())
    steps_per_epoch = N_TRAIN // BATCH_SIZE
    total = EPOCHS * steps_per_epoch
    gen = torch.Generator().manual_seed(SEED)
    print(f"train {tuple(x_tr.shape)} val {tuple(x_va.shape)} | {sum(p.numel() for p in model.parameters())} params "
          f"| {total} steps")
    step = 0
    for epoch in range(1, EPOCHS + 1):
        t_ep = time.time()
        losses = []
        for batch in train_batches(x_tr, y_tr, gen):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total)
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print(f"epoch {epoch:2d} | step {step:4d} | train_loss {np.mean(losses):.4f} | val_loss {val_loss:.4f} "
              f"| val_acc {val_acc:.4f} | lr {opt.param_groups[0]['lr']:.4f} | {time.time() - t_ep:.1f}s")
    print(f"finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()

"""Human-activity recognition from wrist accelerometer windows.

1-D ResNet-ish CNN with BatchNorm on 3-axis accelerometer windows (50 Hz).
Augmentation: random temporal crop, per-axis gain jitter, sensor noise and mixup.
AdamW + OneCycle schedule. Mixup produces soft targets, so the loss is a
soft-target cross-entropy. Validation uses an EMA of the weights.
"""
import copy
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
FS = 50                   # Hz
RAW_LEN = 160             # recorded window (3.2 s)
CROP_LEN = 128            # model input (2.56 s)
ACTIVITIES = ["walking", "jogging", "upstairs", "downstairs", "sitting", "standing"]
N_SUBJECTS = 24
WINDOWS_PER_SUBJECT_PER_CLASS = 14
VAL_SUBJECTS = 6

BATCH_SIZE = 64
EPOCHS = 14
MAX_LR = 3e-3
WEIGHT_DECAY = 1e-2
MIXUP_ALPHA = 0.2
EMA_DECAY = 0.98


# ----------------------------------------------------------------------------
# synthetic recordings
# ----------------------------------------------------------------------------
def _simulate_window(activity, subject, rng):
    t = np.arange(RAW_LEN) / FS
    # each subject wears the device at a slightly different orientation / cadence
    cadence = subject["cadence"] * rng.uniform(0.92, 1.08)
    g_dir = subject["g_dir"]
    sig = np.zeros((3, RAW_LEN), dtype=np.float64)
    phase = rng.uniform(0, 2 * np.pi)
    vigor = subject["vigor"] * rng.uniform(0.75, 1.3)

    if activity in ("walking", "upstairs", "downstairs"):
        f = cadence * {"walking": 1.0, "upstairs": 0.85, "downstairs": 1.1}[activity]
        amp = vigor * {"walking": 0.35, "upstairs": 0.32, "downstairs": 0.4}[activity]
        step = np.sin(2 * np.pi * f * t + phase)
        harm = np.sin(4 * np.pi * f * t + 2 * phase)
        sig[0] += amp * step + 0.15 * harm
        sig[1] += 0.5 * amp * np.cos(2 * np.pi * f * t + phase)
        # vertical component: climbing tilts the wrist, stairs add a heel-strike harmonic
        tilt = {"walking": 0.0, "upstairs": 0.12, "downstairs": -0.1}[activity]
        sig[2] += amp * (0.8 * harm + (0.45 if activity == "downstairs" else 0.25) * np.abs(step)) + tilt
    elif activity == "jogging":
        f = cadence * 1.35
        sig[0] += 0.6 * vigor * np.sin(2 * np.pi * f * t + phase)
        sig[1] += 0.4 * np.sin(2 * np.pi * f * t + phase + 1.0)
        sig[2] += 0.7 * np.abs(np.sin(np.pi * f * t + phase))
    elif activity == "sitting":
        g_dir = g_dir + np.array([0.0, 0.3, -0.2]) + rng.normal(0, 0.15, size=3)
    elif activity == "standing":
        g_dir = g_dir + np.array([0.2, -0.1, 0.05]) + rng.normal(0, 0.15, size=3)

    g_dir = g_dir / np.linalg.norm(g_dir)
    sig += g_dir[:, None]                                   # gravity, in g
    sig += 0.04 * np.cumsum(rng.normal(0, 0.05, size=(3, RAW_LEN)), axis=1)  # slow drift
    sig += rng.normal(0, 0.06, size=(3, RAW_LEN))          # sensor noise
    sig += 0.15 * rng.normal(0, 1, size=(3, 1)) * np.sin(2 * np.pi * rng.uniform(0.2, 1.0) * t)  # arm swing
    return sig.astype(np.float32)


def make_recordings(seed=SEED):
    rng = np.random.default_rng(seed)
    X, y, subj = [], [], []
    for s in range(N_SUBJECTS):
        subject = {"cadence": rng.uniform(1.5, 2.2),
                   "g_dir": np.array([0.2, 0.1, 1.0]) + rng.normal(0, 0.35, size=3),
                   "vigor": rng.uniform(0.7, 1.3)}
        for label, act in enumerate(ACTIVITIES):
            for _ in range(WINDOWS_PER_SUBJECT_PER_CLASS):
                X.append(_simulate_window(act, subject, rng))
                y.append(label)
                subj.append(s)
    return np.stack(X), np.asarray(y, dtype=np.int64), np.asarray(subj)


def subject_split(X, y, subj):
    # hold out whole subjects: windows of one person are strongly correlated
    val_mask = subj >= N_SUBJECTS - VAL_SUBJECTS
    return (X[~val_mask], y[~val_mask]), (X[val_mask], y[val_mask])


class WindowLoader:
    """Minimal batched loader; keeps the augmentation vectorised over the batch."""

    def __init__(self, X, y, mean, std, batch_size, train, seed=SEED):
        self.X = torch.from_numpy((X - mean[None, :, None]) / std[None, :, None])
        self.y = torch.from_numpy(y)
        self.batch_size = batch_size
        self.train = train
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        n = len(self.y)
        return n // self.batch_size if self.train else (n + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        n = len(self.y)
        order = torch.randperm(n, generator=self.gen) if self.train else torch.arange(n)
        for b in range(len(self)):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            x, y = self.X[idx], self.y[idx]
            if self.train:
                x = self._augment(x)
            else:
                off = (RAW_LEN - CROP_LEN) // 2
                x = x[:, :, off:off + CROP_LEN]
            yield x, y

    def _augment(self, x):
        B = x.shape[0]
        offs = torch.randint(0, RAW_LEN - CROP_LEN + 1, (B,), generator=self.gen)
        ar = torch.arange(CROP_LEN)
        x = torch.gather(x, 2, (offs[:, None] + ar[None, :]).unsqueeze(1).expand(B, 3, CROP_LEN))
        gain = 1.0 + 0.1 * torch.randn(B, 3, 1, generator=self.gen)
        x = x * gain + 0.05 * torch.randn(x.shape, generator=self.gen)
        return x


def build_loaders(seed=SEED):
    X, y, subj = make_recordings(seed)
    (x_tr, y_tr), (x_va, y_va) = subject_split(X, y, subj)
    mean = x_tr.mean(axis=(0, 2))
    std = x_tr.std(axis=(0, 2))
    train_loader = WindowLoader(x_tr, y_tr, mean, std, BATCH_SIZE, train=True, seed=seed)
    val_loader = WindowLoader(x_va, y_va, mean, std, 256, train=False)
    return train_loader, val_loader


def mixup(x, y, num_classes, alpha, gen):
    targets = F.one_hot(y, num_classes).float()
    if alpha <= 0:
        return x, targets
    lam = float(np.random.default_rng(int(torch.randint(1 << 31, (1,), generator=gen))).beta(alpha, alpha))
    perm = torch.randperm(x.shape[0], generator=gen)
    x = lam * x + (1 - lam) * x[perm]
    targets = lam * targets + (1 - lam) * targets[perm]
    return x, targets


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ResBlock1d(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv1d(c_in, c_out, 7, stride=stride, padding=3, bias=False)
        self.bn1 = nn.BatchNorm1d(c_out)
        self.conv2 = nn.Conv1d(c_out, c_out, 5, padding=2, bias=False)
        self.bn2 = nn.BatchNorm1d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv1d(c_in, c_out, 1, stride=stride, bias=False),
                                          nn.BatchNorm1d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class HARNet(nn.Module):
    def __init__(self, num_classes=len(ACTIVITIES), width=32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(3, width, 9, stride=2, padding=4, bias=False),
                                  nn.BatchNorm1d(width), nn.ReLU(inplace=True))   # 64
        self.layer1 = ResBlock1d(width, width, 1)
        self.layer2 = ResBlock1d(width, 2 * width, 2)                                # 32
        self.layer3 = ResBlock1d(2 * width, 2 * width, 2)                            # 16
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(x.mean(dim=-1))


class ModelEma:
    """Exponential moving average of the model weights, used for evaluation."""

    def __init__(self, model, decay=EMA_DECAY):
        self.module = copy.deepcopy(model).eval()
        self.decay = decay
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for ema_v, v in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_v.dtype.is_floating_point:
                ema_v.mul_(self.decay).add_(v.detach(), alpha=1 - self.decay)
            else:
                ema_v.copy_(v)


def soft_cross_entropy(logits, targets):
    log_probs = F.log_softmax(logits, dim=1)
    return -(targets * log_probs).sum(dim=1).mean()


_mix_gen = torch.Generator().manual_seed(SEED + 100)


def loss_fn(model, batch):
    x, y = batch
    x, targets = mixup(x, y, len(ACTIVITIES), MIXUP_ALPHA, _mix_gen)
    return soft_cross_entropy(model(x), targets)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=MAX_LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot += soft_cross_entropy(logits, F.one_hot(y, len(ACTIVITIES)).float()).item() * len(y)
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 4:
            break
    return {
        "model": HARNet(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(ACTIVITIES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_loader, val_loader = build_loaders()
    model = HARNet()
    ema = ModelEma(model)
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=MAX_LR, epochs=EPOCHS, steps_per_epoch=len(train_loader), pct_start=0.25)
    steps = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        running = 0.0
        for x, y in train_loader:
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            ema.update(model)
            running += loss.item()
        val_loss, val_acc = evaluate(ema.module, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s {1000 * dt / steps:.0f}ms/step - loss: {running / steps:.4f} "
              f"- val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - lr: {scheduler.get_last_lr()[0]:.2e}")
    torch.save({"model": model.state_dict(), "ema": ema.module.state_dict()}, "harnet.pt")


if __name__ == "__main__":
    main()

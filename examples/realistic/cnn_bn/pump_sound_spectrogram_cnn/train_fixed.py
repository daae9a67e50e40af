"""Machine-condition classification from log-mel spectrograms of pump recordings.

Small ResNet-ish CNN with BatchNorm2d, SGD (nesterov) + linear warmup / cosine decay.
Logs in the Hugging Face Trainer dict style.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 11
N_MELS, N_FRAMES = 32, 40
CONDITIONS = ["normal", "bearing_wear", "impeller_imbalance", "cavitation", "seal_leak", "misalignment"]
N_TRAIN_PER_CLASS, N_VAL_PER_CLASS = 160, 80
BATCH_SIZE = 64
EPOCHS = 10
LR = 0.05
WARMUP_RATIO = 0.05
WEIGHT_DECAY = 5e-4
LOGGING_STEPS = 20
HERE = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- data
def synth_logmel(cond, rng):
    f = np.arange(N_MELS)[:, None].astype(np.float32)
    t = np.arange(N_FRAMES)[None, :].astype(np.float32)
    base_f = rng.uniform(3, 7)          # shaft-rate harmonic position (mel bins) varies by pump
    S = np.zeros((N_MELS, N_FRAMES), np.float32)
    for h in range(1, 5):               # harmonic stack of the motor / shaft
        S += (1.0 / h) * np.exp(-0.5 * ((f - base_f * h) / 0.9) ** 2)
    S += 0.15 * np.exp(-f / 12.0)       # broadband flow noise, falls with frequency
    if cond == "bearing_wear":
        period = rng.integers(5, 9)
        ph = rng.integers(0, period)
        clicks = ((t.astype(int) + ph) % period == 0).astype(np.float32)
        S += 0.4 * clicks * (f > 14) * np.exp(-((f - 24) / 8) ** 2)
    elif cond == "impeller_imbalance":
        S += 0.5 * np.exp(-0.5 * ((f - base_f) / 0.9) ** 2) * (1 + 0.3 * np.sin(2 * np.pi * t / rng.uniform(8, 14)))
    elif cond == "cavitation":
        S += 0.25 * (f > 18) * rng.gamma(2.0, 0.5, size=(1, N_FRAMES)) * rng.uniform(0.6, 1.0, size=(N_MELS, 1))
    elif cond == "seal_leak":
        fc = rng.uniform(20, 27)
        S += 0.3 * np.exp(-0.5 * ((f - fc) / 2.5) ** 2)
    elif cond == "misalignment":
        S += 0.4 * np.exp(-0.5 * ((f - 2 * base_f) / 0.9) ** 2) + 0.25 * np.exp(-0.5 * ((f - 3 * base_f) / 0.9) ** 2)
    gain = rng.uniform(0.6, 1.4)
    S = gain * S + rng.gamma(1.5, 0.3, size=S.shape)   # background / other machines
    return np.log(S + 1e-3).astype(np.float32)


def make_split(n_per_class, rng):
    xs, ys = [], []
    for k, c in enumerate(CONDITIONS):
        for _ in range(n_per_class):
            xs.append(synth_logmel(c, rng))
            ys.append(k)
    return np.stack(xs)[:, None], np.array(ys, np.int64)


def spec_augment(x, rng, max_f=4, max_t=6):
    x = x.copy()
    fill = x.mean()
    f0 = rng.integers(0, N_MELS - max_f)
    x[:, f0:f0 + rng.integers(0, max_f + 1), :] = fill
    t0 = rng.integers(0, N_FRAMES - max_t)
    x[:, :, t0:t0 + rng.integers(0, max_t + 1)] = fill
    return x


def build_data():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = make_split(N_TRAIN_PER_CLASS, rng)
    x_va, y_va = make_split(N_VAL_PER_CLASS, rng)
    mu, sd = x_tr.mean(), x_tr.std()
    x_tr, x_va = (x_tr - mu) / sd, (x_va - mu) / sd
    # one fixed SpecAugment view per clip plus the clean clip
    x_aug = np.stack([spec_augment(x, rng) for x in x_tr])
    x_tr = np.concatenate([x_tr, x_aug])
    y_tr = np.concatenate([y_tr, y_tr])
    train_ds = TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr))
    val_ds = TensorDataset(torch.from_numpy(x_va), torch.from_numpy(y_va))
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_dl = DataLoader(val_ds, batch_size=256)
    return train_dl, val_dl


# ----------------------------------------------------------------------------- model
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.short is None else self.short(x)))


class PumpResNet(nn.Module):
    def __init__(self, n_classes=len(CONDITIONS), w=12):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(w, w, 1)
        self.layer2 = BasicBlock(w, 2 * w, 2)
        self.layer3 = BasicBlock(2 * w, 4 * w, 2)
        self.fc = nn.Linear(4 * w, n_classes)
        self._init_weights()

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.data.normal_(0, math.sqrt(2.0 / (m.kernel_size[0] * m.kernel_size[1] * m.out_channels)))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1.0)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=0.9, nesterov=True, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_data()
    model = PumpResNet()
    return dict(model=model, data=train_dl, val_data=val_dl, loss_fn=loss_fn,
                optimizer=make_optimizer(model.parameters()), make_optimizer=make_optimizer,
                num_classes=len(CONDITIONS), task="classification")


def warmup_cosine(optimizer, warmup, total):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    loss, correct, n = 0.0, 0, 0
    for x, y in dl:
        out = model(x)
        loss += F.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return loss / n, correct / n


def main():
    torch.set_num_threads(1)
    t = make_target()
    model, train_dl, val_dl, optimizer = t["model"], t["data"], t["val_data"], t["optimizer"]
    total = EPOCHS * len(train_dl)
    scheduler = warmup_cosine(optimizer, int(WARMUP_RATIO * total), total)
    print("***** Running training *****")
    print(f"  Num examples = {len(train_dl.dataset)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Train batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total}")
    t0 = time.time()
    step, running = 0, 0.0
    model.train()
    for epoch in range(EPOCHS):
        for batch in train_dl:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            if step % LOGGING_STEPS == 0:
                print({"loss": round(running / LOGGING_STEPS, 4), "grad_norm": round(gn.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0], "epoch": round(step / len(train_dl), 2)})
                running = 0.0
        vl, va = evaluate(model, val_dl)
        print({"eval_loss": round(vl, 4), "eval_accuracy": round(va, 4), "eval_runtime": round(time.time() - t0, 2),
               "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(EPOCHS * len(train_dl.dataset) / rt, 2),
           "train_steps_per_second": round(total / rt, 3), "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()

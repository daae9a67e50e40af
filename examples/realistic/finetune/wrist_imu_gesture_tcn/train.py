"""Wrist-IMU gesture recognition: fine-tune a temporal conv encoder (pretrained on a
daily-activity dataset) with a new gesture head, Trainer-style logging."""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

SEED = 2024
T = 128
FS = 50.0
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
PRETRAINED = os.path.join(RUN_DIR, "activity_tcn_encoder.pt")
GESTURES = ["swipe_left", "swipe_right", "swipe_up", "swipe_down", "circle_cw", "circle_ccw", "double_tap", "shake"]
ACTIVITIES = ["walk", "run", "stairs_up", "stairs_down", "sit", "stand"]


class TrainingArguments:
    num_train_epochs = 10
    per_device_train_batch_size = 32
    per_device_eval_batch_size = 128
    learning_rate = 2e-3
    encoder_lr_scale = 0.25
    weight_decay = 0.05
    warmup_ratio = 0.1
    max_grad_norm = 1.0
    logging_steps = 20
    evaluation_strategy = "epoch"
    seed = SEED


# ----------------------------------------------------------------------------- synthetic IMU
def _gesture(label, rng):
    t = np.arange(T) / FS
    sig = np.zeros((6, T))
    start = rng.uniform(0.3, 0.9)
    dur = rng.uniform(0.7, 1.2)
    env = np.exp(-0.5 * ((t - start - dur / 2) / (dur / 4)) ** 2)
    amp = rng.uniform(0.8, 1.5)
    name = GESTURES[label]
    if name.startswith("swipe"):
        axis = 0 if name in ("swipe_left", "swipe_right") else 1
        sgn = 1.0 if name in ("swipe_right", "swipe_up") else -1.0
        pulse = np.gradient(env) * FS * 0.4
        sig[axis] += sgn * amp * pulse
        sig[3 + (1 - axis)] += sgn * 0.5 * amp * env
    elif name.startswith("circle"):
        sgn = 1.0 if name == "circle_cw" else -1.0
        w = 2 * np.pi * rng.uniform(1.2, 1.8)
        sig[0] += amp * env * np.cos(w * t)
        sig[1] += sgn * amp * env * np.sin(w * t)
        sig[5] += sgn * 0.8 * amp * env
    elif name == "double_tap":
        for c in (start + 0.3, start + 0.6):
            sig[2] += 2.0 * amp * np.exp(-0.5 * ((t - c) / 0.03) ** 2)
    else:
        w = 2 * np.pi * rng.uniform(4.0, 6.0)
        sig[0] += 1.2 * amp * env * np.sin(w * t)
        sig[4] += 0.6 * amp * env * np.sin(w * t + 1.0)
    return sig


def _activity(label, rng):
    t = np.arange(T) / FS
    sig = np.zeros((6, T))
    name = ACTIVITIES[label]
    cadence = {"walk": 1.8, "run": 2.8, "stairs_up": 1.5, "stairs_down": 1.7}.get(name)
    if cadence:
        f = cadence * rng.uniform(0.9, 1.1)
        a = {"walk": 0.6, "run": 1.5, "stairs_up": 0.8, "stairs_down": 1.0}[name]
        ph = rng.uniform(0, 2 * np.pi)
        sig[2] += a * np.sin(2 * np.pi * f * t + ph)
        sig[0] += 0.4 * a * np.sin(np.pi * f * t + ph)
        sig[4] += 0.5 * a * np.sin(2 * np.pi * f * t + ph + 0.7)
        if name.startswith("stairs"):
            sig[1] += (0.3 if name == "stairs_up" else -0.3)
    else:
        sig[1 if name == "sit" else 2] += 0.9
    return sig


def make_split(fn, labels, rng):
    x = np.stack([fn(int(k), rng) for k in labels])
    tilt = rng.normal(0, 0.15, (len(labels), 6, 1))
    x = x + tilt + rng.normal(0, 0.12, x.shape)
    return x.astype(np.float32)


class GestureDataset(Dataset):
    def __init__(self, x, y, augment=False, seed=0):
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)
        self.augment = augment
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if self.augment:
            x = x * (0.7 + 0.6 * torch.rand(6, 1, generator=self.g))
            x = x + 0.25 * torch.randn(x.shape, generator=self.g)
            x = torch.roll(x, int(torch.randint(-20, 21, (1,), generator=self.g)), dims=-1)
            if torch.rand(1, generator=self.g) < 0.3:
                x = x.clone()
                x[int(torch.randint(0, 6, (1,), generator=self.g))] = 0.0
        return {"inputs": x, "labels": self.y[i]}


def build_datasets(args):
    rng = np.random.default_rng(SEED)
    ytr = rng.integers(0, len(GESTURES), 960)
    yva = rng.integers(0, len(GESTURES), 480)
    xtr = make_split(_gesture, ytr, rng)
    xva = make_split(_gesture, yva, rng)
    return (GestureDataset(xtr, ytr.astype(np.int64), augment=True, seed=args.seed),
            GestureDataset(xva, yva.astype(np.int64)))


# ----------------------------------------------------------------------------- model
class TCNEncoder(nn.Module):
    def __init__(self, c_in=6, width=48):
        super().__init__()
        layers, ch = [], c_in
        for d in (1, 2, 4, 8):
            layers += [nn.Conv1d(ch, width, 5, padding=2 * d, dilation=d), nn.BatchNorm1d(width), nn.ReLU()]
            ch = width
        self.net = nn.Sequential(*layers)
        self.hidden_size = width

    def forward(self, x):
        return self.net(x).mean(-1)


class GestureModel(nn.Module):
    def __init__(self, num_labels):
        super().__init__()
        self.encoder = TCNEncoder()
        self.dropout = nn.Dropout(0.3)
        self.classifier = nn.Linear(self.encoder.hidden_size, num_labels)

    def forward(self, inputs, labels=None):
        logits = self.classifier(self.dropout(self.encoder(inputs)))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


def pretrain_encoder():
    rng = np.random.default_rng(SEED + 1)
    y = rng.integers(0, len(ACTIVITIES), 1200)
    x = torch.from_numpy(make_split(_activity, y, rng))
    y = torch.from_numpy(y.astype(np.int64))
    enc = TCNEncoder()
    head = nn.Linear(enc.hidden_size, len(ACTIVITIES))
    opt = torch.optim.Adam(list(enc.parameters()) + list(head.parameters()), lr=2e-3)
    g = torch.Generator().manual_seed(SEED)
    for epoch in range(3):
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, len(y), 64):
            idx = perm[i:i + 64]
            loss = F.cross_entropy(head(enc(x[idx])), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(enc.state_dict(), PRETRAINED)


def build_model():
    model = GestureModel(len(GESTURES))
    if os.path.exists(PRETRAINED):
        model.encoder.load_state_dict(torch.load(PRETRAINED))
    for p in model.encoder.net[:3].parameters():
        p.requires_grad = False
    return model


def create_optimizer(model, args):
    decay, no_decay = [], []
    for n, p in model.encoder.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim == 1 else decay).append(p)
    enc_lr = args.learning_rate * args.encoder_lr_scale
    groups = [
        {"params": decay, "lr": enc_lr, "weight_decay": args.weight_decay},
        {"params": no_decay, "lr": enc_lr, "weight_decay": 0.0},
        {"params": list(model.classifier.parameters()), "lr": args.learning_rate, "weight_decay": args.weight_decay},
    ]
    return torch.optim.AdamW(groups)


def collate(features):
    return {"inputs": torch.stack([f["inputs"] for f in features]),
            "labels": torch.stack([f["labels"] for f in features])}


def get_dataloaders(args):
    train_ds, eval_ds = build_datasets(args)
    train_dl = DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True, collate_fn=collate,
                          generator=torch.Generator().manual_seed(args.seed))
    eval_dl = DataLoader(eval_ds, batch_size=args.per_device_eval_batch_size, collate_fn=collate)
    return train_dl, eval_dl


def compute_loss(model, inputs):
    return model(**inputs)["loss"]


@torch.no_grad()
def evaluate(model, eval_dl):
    model.eval()
    t0 = time.time()
    loss, correct, n = 0.0, 0, 0
    for batch in eval_dl:
        out = model(**batch)
        bs = len(batch["labels"])
        loss += out["loss"].item() * bs
        correct += (out["logits"].argmax(-1) == batch["labels"]).sum().item()
        n += bs
    rt = time.time() - t0
    model.train()
    return {"eval_loss": round(loss / n, 4), "eval_accuracy": round(correct / n, 4), "eval_runtime": round(rt, 4),
            "eval_samples_per_second": round(n / rt, 3), "eval_steps_per_second": round(len(eval_dl) / rt, 3)}


def make_target():
    torch.manual_seed(SEED)
    args = TrainingArguments()
    train_dl, eval_dl = get_dataloaders(args)
    model = build_model()
    return {
        "model": model,
        "data": train_dl,
        "val_data": eval_dl,
        "loss_fn": compute_loss,
        "optimizer": create_optimizer(model, args),
        "num_classes": len(GESTURES),
        "task": "classification",
    }


def main():
    args = TrainingArguments()
    torch.manual_seed(args.seed)
    pretrain_encoder()
    train_dl, eval_dl = get_dataloaders(args)
    model = build_model()
    opt = create_optimizer(model, args)
    steps_per_epoch = len(train_dl)
    max_steps = steps_per_epoch * args.num_train_epochs
    warmup = math.ceil(args.warmup_ratio * max_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / max(1, warmup) if s < warmup else max(0.0, (max_steps - s) / max(1, max_steps - warmup)))
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print("***** Running training *****")
    print(f"  Num examples = {len(train_dl.dataset)}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    print(f"  Total optimization steps = {max_steps}")
    print(f"  Number of trainable parameters = {n_train:,}")
    model.train()
    t_start = time.time()
    step, tr_loss, logged, total_loss = 0, 0.0, 0, 0.0
    for epoch in range(args.num_train_epochs):
        for inputs in train_dl:
            loss = compute_loss(model, inputs)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            tr_loss += loss.item()
            total_loss += loss.item()
            logged += 1
            if step % args.logging_steps == 0:
                print({"loss": round(tr_loss / logged, 4), "grad_norm": round(gn.item(), 4),
                       "learning_rate": sched.get_last_lr()[-1], "epoch": round(step / steps_per_epoch, 2)})
                tr_loss, logged = 0.0, 0
        metrics = evaluate(model, eval_dl)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    rt = time.time() - t_start
    print({"train_runtime": round(rt, 4), "train_samples_per_second": round(len(train_dl.dataset) * args.num_train_epochs / rt, 3),
           "train_steps_per_second": round(max_steps / rt, 3), "train_loss": round(total_loss / max_steps, 4),
           "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()

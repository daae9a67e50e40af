"""PCB component classifier for the AOI (automated optical inspection) line.

The AOI camera exports one 24x24 grayscale crop per placed component. The
labelling tool writes an image stack (`<split>_images.npy`) and a CSV with
the component type of each crop (`<split>_labels.csv`, same row order).
A small BatchNorm CNN with flip / shift / brightness augmentation is trained
on the train export and checked on the val export. Keras-style logs.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(
    seed=11,
    n_train=2400,
    n_val=800,
    img=24,
    batch_size=64,
    epochs=10,
    lr=1e-3,
    weight_decay=1e-4,
    width=16,
)

COMPONENTS = ["resistor", "capacitor", "ic", "diode", "inductor", "crystal"]
# the line places far more passives than anything else
COMPONENT_P = [0.30, 0.25, 0.12, 0.13, 0.10, 0.10]


def render_component(kind, rng, size):
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    cy = size / 2 + rng.uniform(-2.5, 2.5)
    cx = size / 2 + rng.uniform(-2.5, 2.5)
    s = rng.uniform(0.8, 1.15)
    img = np.zeros((size, size), np.float32)
    body = rng.uniform(0.35, 0.9)
    if kind == "resistor":
        hw, hh = 6.5 * s, 2.6 * s
        img[(np.abs(xx - cx) < hw) & (np.abs(yy - cy) < hh)] = body
        for k in range(3):  # colour bands
            bx = cx - 3.5 * s + k * 2.6 * s
            img[(np.abs(xx - bx) < 0.7) & (np.abs(yy - cy) < hh)] = body * 0.35
        img[(np.abs(yy - cy) < 0.6) & (np.abs(xx - cx) >= hw) & (np.abs(xx - cx) < hw + 4)] = 0.8
    elif kind == "capacitor":
        r = np.hypot(yy - cy, xx - cx)
        img[r < 6.0 * s] = body
        img[(r < 6.0 * s) & (xx - cx > 2.8 * s)] = body * 0.3  # polarity stripe
    elif kind == "ic":
        hw, hh = 5.5 * s, 4.5 * s
        img[(np.abs(xx - cx) < hw) & (np.abs(yy - cy) < hh)] = body * 0.5
        for k in range(4):
            px = cx - 4.2 * s + k * 2.8 * s
            pins = (np.abs(xx - px) < 0.7) & (np.abs(np.abs(yy - cy) - hh - 1.5) < 1.5)
            img[pins] = 0.9
        img[np.hypot(yy - (cy - 2.5 * s), xx - (cx - 3.5 * s)) < 0.9] = body  # pin-1 dot
    elif kind == "diode":
        hw, hh = 4.0 * s, 2.0 * s
        img[(np.abs(xx - cx) < hw) & (np.abs(yy - cy) < hh)] = body
        img[(np.abs(xx - (cx + 2.8 * s)) < 0.9) & (np.abs(yy - cy) < hh)] = 1.0  # cathode band
        img[(np.abs(yy - cy) < 0.6) & (np.abs(xx - cx) >= hw) & (np.abs(xx - cx) < hw + 5)] = 0.8
    elif kind == "inductor":
        r = np.hypot(yy - cy, xx - cx)
        img[(r < 6.5 * s) & (r > 3.2 * s)] = body
        ang = np.arctan2(yy - cy, xx - cx)
        winding = (np.cos(10 * ang) > 0.3) & (r < 6.5 * s) & (r > 3.2 * s)
        img[winding] = body * 0.55
    elif kind == "crystal":
        e = ((xx - cx) / (7.0 * s)) ** 2 + ((yy - cy) / (3.2 * s)) ** 2
        img[e < 1.0] = body
        img[e < 0.45] = body * 0.75
    if rng.random() < 0.5:  # placed at 90 degrees
        img = img.T.copy()
    img += rng.uniform(0.05, 0.2)  # board background
    img += rng.normal(0, rng.uniform(0.15, 0.4), img.shape).astype(np.float32)
    return np.clip(img, 0, 1.2)


def write_export(out_dir, split, n, rng, size):
    kinds = rng.choice(len(COMPONENTS), size=n, p=COMPONENT_P)
    images = np.stack([render_component(COMPONENTS[k], rng, size) for k in kinds]).astype(np.float32)
    labels = pd.DataFrame({"crop_id": np.arange(n), "component": np.array(COMPONENTS)[kinds],
                           "board": rng.integers(1000, 1200, size=n)})
    img_path = os.path.join(out_dir, f"{split}_images.npy")
    csv_path = os.path.join(out_dir, f"{split}_labels.csv")
    np.save(img_path, images)
    labels.to_csv(csv_path, index=False)
    return img_path, csv_path


def load_split(img_path, csv_path):
    images = np.load(img_path)
    df = pd.read_csv(csv_path)
    y, classes = pd.factorize(df["component"])
    x = torch.from_numpy(images).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64)), list(classes)


def build_data(cfg, tmp_dir):
    rng = np.random.default_rng(cfg["seed"])
    tr_paths = write_export(tmp_dir, "train", cfg["n_train"], rng, cfg["img"])
    va_paths = write_export(tmp_dir, "val", cfg["n_val"], rng, cfg["img"])
    x_tr, y_tr, classes = load_split(*tr_paths)
    x_va, y_va, _ = load_split(*va_paths)
    mean, std = x_tr.mean(), x_tr.std()
    return ((x_tr - mean) / std, y_tr), ((x_va - mean) / std, y_va), classes


def augment(x):
    # components can sit on the board in either orientation / polarity
    flip_h = torch.rand(x.shape[0]) < 0.5
    flip_v = torch.rand(x.shape[0]) < 0.5
    x = torch.where(flip_h[:, None, None, None], x.flip(3), x)
    x = torch.where(flip_v[:, None, None, None], x.flip(2), x)
    dy, dx = np.random.randint(-2, 3, size=2)
    x = torch.roll(x, shifts=(int(dy), int(dx)), dims=(2, 3))
    gain = 1 + 0.15 * torch.randn(x.shape[0], 1, 1, 1)
    return x * gain


class ComponentNet(nn.Module):
    def __init__(self, n_classes, width):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

        self.features = nn.Sequential(block(1, width), nn.MaxPool2d(2),
                                      block(width, 2 * width), nn.MaxPool2d(2),
                                      block(2 * width, 2 * width))
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(2 * width, n_classes))

    def forward(self, x):
        h = self.features(x)
        return self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_optimizer(model, cfg):
    return torch.optim.Adam(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def make_target():
    cfg = dict(CONFIG)
    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (x_tr, y_tr), _, classes = build_data(cfg, tmp)
    model = ComponentNet(len(classes), cfg["width"])
    bs = cfg["batch_size"]
    data = [(augment(x_tr[i * bs:(i + 1) * bs]), y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model, cfg), "task": "classification", "num_classes": len(classes)}


@torch.no_grad()
def evaluate(model, x, y, bs=400):
    model.eval()
    tot, correct = 0.0, 0
    for i in range(0, len(y), bs):
        logits = model(x[i:i + bs])
        tot += F.cross_entropy(logits, y[i:i + bs], reduction="sum").item()
        correct += (logits.argmax(1) == y[i:i + bs]).sum().item()
    model.train()
    return tot / len(y), correct / len(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    p.add_argument("--batch-size", type=int, default=CONFIG["batch_size"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr, batch_size=cli.batch_size)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (x_tr, y_tr), (x_va, y_va), classes = build_data(cfg, tmp)
    print(f"Train on {len(y_tr)} samples, validate on {len(y_va)} samples ({len(classes)} classes: {', '.join(classes)})")

    train_dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_tr, y_tr), batch_size=cfg["batch_size"],
                                           shuffle=True, generator=torch.Generator().manual_seed(cfg["seed"]))
    model = ComponentNet(len(classes), cfg["width"])
    opt = make_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["epochs"])
    steps = len(train_dl)

    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        tot, correct, n = 0.0, 0, 0
        for xb, yb in train_dl:
            xb = augment(xb)
            logits = model(xb)
            loss = criterion(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            n += len(yb)
        sched.step()
        val_loss, val_acc = evaluate(model, x_va, y_va)
        dt = time.time() - t0
        print(f"Epoch {epoch + 1}/{cfg['epochs']}")
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {tot / n:.4f} - accuracy: {correct / n:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()

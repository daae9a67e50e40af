"""Seven-segment meter-reading classifier: a tiny ResNet with BatchNorm.

Written LightningModule-style (training_step / validation_step /
configure_optimizers) with a minimal in-file Trainer so it runs with torch only.
OneCycleLR is stepped every batch ("interval": "step").

    python train.py [--max-epochs 8] [--lr 0.1]
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

H, W = 24, 16
#            a  b  c  d  e  f  g
SEGMENTS = {0: (1, 1, 1, 1, 1, 1, 0), 1: (0, 1, 1, 0, 0, 0, 0), 2: (1, 1, 0, 1, 1, 0, 1),
            3: (1, 1, 1, 1, 0, 0, 1), 4: (0, 1, 1, 0, 0, 1, 1), 5: (1, 0, 1, 1, 0, 1, 1),
            6: (1, 0, 1, 1, 1, 1, 1), 7: (1, 1, 1, 0, 0, 0, 0), 8: (1, 1, 1, 1, 1, 1, 1),
            9: (1, 1, 1, 1, 0, 1, 1)}


def render_digits(n, seed):
    """LCD digits with random colour, offset, segment thickness, dim segments and glare."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    yy = torch.arange(H).view(H, 1).float()
    xx = torch.arange(W).view(1, W).float()
    imgs = torch.empty(n, 3, H, W)
    for i in range(n):
        oy, ox = torch.randint(-2, 3, (2,), generator=g).tolist()
        t = 1.0 + torch.rand(1, generator=g).item() * 1.2
        top, mid, bot, left, right = 3 + oy, 12 + oy, 21 + oy, 3 + ox, 12 + ox
        hseg = lambda y: ((yy - y).abs() < t) & (xx >= left) & (xx <= right)  # noqa: E731
        vseg = lambda x, y0, y1: ((xx - x).abs() < t) & (yy >= y0) & (yy <= y1)  # noqa: E731
        masks = [hseg(top), vseg(right, top, mid), vseg(right, mid, bot), hseg(bot),
                 vseg(left, mid, bot), vseg(left, top, mid), hseg(mid)]
        on = torch.zeros(H, W)
        for m, s in zip(masks, SEGMENTS[int(labels[i])]):
            on = torch.maximum(on, m.float() * (1.0 if s else 0.15))  # unlit segments still faintly visible
        fg = torch.rand(3, 1, 1, generator=g) * 0.6 + 0.4
        bg = torch.rand(3, 1, 1, generator=g) * 0.3
        img = bg + (fg - bg) * on
        glare = torch.rand(1, generator=g).item() * 0.3 * torch.exp(-((xx - W * torch.rand(1, generator=g)) ** 2) / 20)
        imgs[i] = (img + glare + 0.08 * torch.randn(3, H, W, generator=g)).clamp(0, 1)
    return imgs, labels


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class TinyResNet(nn.Module):
    def __init__(self, num_classes=10, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.layer3 = BasicBlock(2 * width, 4 * width, stride=2)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


MEAN = torch.tensor([0.31, 0.31, 0.31]).view(1, 3, 1, 1)
STD = torch.tensor([0.27, 0.27, 0.27]).view(1, 3, 1, 1)


class LitMeterReader(nn.Module):
    def __init__(self, lr=0.1, max_epochs=8, steps_per_epoch=1, label_smoothing=0.1):
        super().__init__()
        self.model = TinyResNet()
        self.lr, self.max_epochs, self.steps_per_epoch = lr, max_epochs, steps_per_epoch
        self.label_smoothing = label_smoothing

    def forward(self, x):
        return self.model((x - MEAN) / STD)

    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self(x), y, label_smoothing=self.label_smoothing)

    def validation_step(self, batch):
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, epochs=self.max_epochs,
                                                    steps_per_epoch=self.steps_per_epoch)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def build_data(batch_size=64):
    tx, ty = render_digits(3000, seed=10)
    vx, vy = render_digits(600, seed=11)
    return (DataLoader(TensorDataset(tx, ty), batch_size=batch_size, shuffle=True, drop_last=True),
            DataLoader(TensorDataset(vx, vy), batch_size=200))


def loss_fn(model, batch):
    return model.training_step(batch)


def make_target():
    torch.manual_seed(0)
    train_loader, _ = build_data()
    model = LitMeterReader(steps_per_epoch=len(train_loader))
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": model.configure_optimizers()["optimizer"],
            "make_optimizer": lambda params: torch.optim.SGD(params, lr=model.lr, momentum=0.9, nesterov=True,
                                                             weight_decay=5e-4),
            "num_classes": 10, "task": "classification"}


class Trainer:
    """The bits of lightning.Trainer this script needs, with Lightning-looking console output."""

    def __init__(self, max_epochs):
        self.max_epochs = max_epochs

    def fit(self, module, train_loader, val_loader):
        cfg = module.configure_optimizers()
        opt, sched = cfg["optimizer"], cfg["lr_scheduler"]["scheduler"]
        print("GPU available: False, used: False")
        print("TPU available: False, using: 0 TPU cores")
        print("HPU available: False, using: 0 HPUs")
        print()
        print("  | Name  | Type       | Params | Mode ")
        print("---------------------------------------------")
        print(f"0 | model | TinyResNet | {sum(p.numel() for p in module.parameters()) / 1e3:.1f} K | train")
        print("---------------------------------------------")
        n = len(train_loader)
        for epoch in range(self.max_epochs):
            module.train()
            t0, last = time.time(), 0.0
            tot = 0.0
            for i, batch in enumerate(train_loader):
                loss = module.training_step(batch)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                last = loss.item()
                tot += last
            module.eval()
            vl, va, k = 0.0, 0.0, 0
            with torch.no_grad():
                for batch in val_loader:
                    l_, a_ = module.validation_step(batch)
                    vl, va, k = vl + l_, va + a_, k + 1
            dt = time.time() - t0
            print(f"Epoch {epoch}: 100%|██████████| {n}/{n} [00:{int(dt):02d}<00:00, {n / dt:.2f}it/s, v_num=0, "
                  f"train_loss_step={last:.3f}, lr={sched.get_last_lr()[0]:.4f}, val_loss={vl / k:.3f}, "
                  f"val_acc={va / k:.3f}, train_loss_epoch={tot / n:.3f}]", flush=True)
        print(f"`Trainer.fit` stopped: `max_epochs={self.max_epochs}` reached.")


def main():
    torch.set_num_threads(1)  # keep CPU usage to one core
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    print(f"Seed set to {args.seed}")
    train_loader, val_loader = build_data(args.batch_size)
    model = LitMeterReader(lr=args.lr, max_epochs=args.max_epochs, steps_per_epoch=len(train_loader))
    Trainer(max_epochs=args.max_epochs).fit(model, train_loader, val_loader)


if __name__ == "__main__":
    main()

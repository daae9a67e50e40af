"""Fault detection on vibration recordings: linear probe, then full fine-tune (LP-FT).

Backbone comes from pretrain.py (dominant-tone classification). Downstream labels:
    0 = low band, clean      1 = low band, impact
    2 = high band, clean     3 = high band, impact
"""
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from backbone import ConvBackbone
from signals import N_FREQ_BINS, make_signals

CKPT = "backbone_pretrained.pt"
N_CLASSES = 4
N_TRAIN, N_VAL = 800, 500
BATCH_SIZE = 32
LP_EPOCHS = 4
FT_EPOCHS = 20
LP_LR = 1e-2
FT_LR_BACKBONE = 5e-4
FT_LR_HEAD = 2e-3
LOG_EVERY = 25


class FaultDetector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = ConvBackbone()
        self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(self.backbone.out_dim, N_CLASSES))

    @torch.no_grad()
    def embed(self, x):
        return self.backbone(x)

    def forward(self, x):
        return self.head(self.embed(x))


def load_split(n, seed):
    x, f = make_signals(n, seed)
    high_band = f["freq_bin"] >= N_FREQ_BINS // 2
    y = 2 * high_band.astype(int) + f["has_burst"].astype(int)
    return torch.from_numpy(x), torch.from_numpy(y).long()


def iterate_batches(x, y, batch_size, generator):
    perm = torch.randperm(len(x), generator=generator)
    for i in range(0, len(x), batch_size):
        idx = perm[i:i + batch_size]
        yield x[idx], y[idx]


def build_model():
    model = FaultDetector()
    model.backbone.load_state_dict(torch.load(CKPT, map_location="cpu"))
    return model


def set_backbone_trainable(model, trainable):
    for p in model.backbone.parameters():
        p.requires_grad = trainable


def make_lp_optimizer(model):
    return torch.optim.AdamW(model.head.parameters(), lr=LP_LR, weight_decay=1e-4)


def make_ft_optimizer(params):
    params = list(params)
    head_ids = {id(p) for p in params[-2:]}  # head.1.weight, head.1.bias are registered last
    groups = [
        {"params": [p for p in params if id(p) not in head_ids], "lr": FT_LR_BACKBONE},
        {"params": [p for p in params if id(p) in head_ids], "lr": FT_LR_HEAD},
    ]
    return torch.optim.AdamW(groups, weight_decay=1e-4)


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = torch.cat([model(x[i:i + 250]) for i in range(0, len(x), 250)])
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def make_target():
    torch.manual_seed(0)
    x_tr, y_tr = load_split(N_TRAIN, seed=301)
    g = torch.Generator().manual_seed(0)
    batches = list(iterate_batches(x_tr, y_tr, BATCH_SIZE, g))[:6]
    model = build_model()
    set_backbone_trainable(model, True)  # full fine-tuning stage
    return {
        "model": model,
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_ft_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


def run_stage(name, model, opt, epochs, x_tr, y_tr, x_va, y_va, g, step):
    for epoch in range(1, epochs + 1):
        t0 = time.time()
        running = 0.0
        for xb, yb in iterate_batches(x_tr, y_tr, BATCH_SIZE, g):
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            running += loss.item()
            if step % LOG_EVERY == 0:
                print(f"[{name}] step {step:4d} | train_loss {running / LOG_EVERY:.4f}")
                running = 0.0
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print(f"[{name}] epoch {epoch}/{epochs} done | val_loss {val_loss:.4f} | val_acc {val_acc:.4f} "
              f"| {time.time() - t0:.1f}s")
    return step


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    x_tr, y_tr = load_split(N_TRAIN, seed=301)
    x_va, y_va = load_split(N_VAL, seed=302)
    model = build_model()
    print(f"loaded backbone weights from {CKPT}")
    g = torch.Generator().manual_seed(0)

    # stage 1: linear probe, backbone frozen
    set_backbone_trainable(model, False)
    opt = make_lp_optimizer(model)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"stage 1 (linear probe): {n_train:,} trainable params")
    step = run_stage("lp", model, opt, LP_EPOCHS, x_tr, y_tr, x_va, y_va, g, 0)

    # stage 2: unfreeze everything, lower LR on the backbone
    set_backbone_trainable(model, True)
    opt = make_ft_optimizer(model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"stage 2 (full fine-tune): {n_train:,} trainable params, "
          f"lr backbone {FT_LR_BACKBONE:g} / head {FT_LR_HEAD:g}")
    run_stage("ft", model, opt, FT_EPOCHS, x_tr, y_tr, x_va, y_va, g, step)
    val_loss, val_acc = evaluate(model, x_va, y_va)
    print(f"final: val_loss {val_loss:.4f} val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()

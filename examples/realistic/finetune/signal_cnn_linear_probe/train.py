"""Linear probe on a 1D-CNN encoder pretrained on source identification.

Stage 1 (pretext): train a small conv encoder to identify which of 8 emitter
sources produced a noisy waveform (dominant carrier frequency), save weights.
Stage 2 (downstream): load the encoder, freeze it, and fit a linear head that
classifies the modulation band of the secondary component. The downstream set
is small (a few hundred labelled waveforms), which is the point of pretraining.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "pretrained_source_id.pt")

SIG_LEN = 96
N_SOURCES = 32
N_BANDS = 4
FEAT_DIM = 64

PRETRAIN_N = 6000
PRETRAIN_EPOCHS = 4
PRETRAIN_BS = 64

FT_TRAIN_N = 320
FT_VAL_N = 1000
FT_EPOCHS = 25
FT_BS = 32
FT_LR = 3e-3


# ----------------------------------------------------------------------------
# synthetic waveforms
# ----------------------------------------------------------------------------
CARRIER_FREQS = np.linspace(2.0, 16.0, 8)                 # cycles per window
SECONDARY_FREQS = np.linspace(20.0, 40.0, N_BANDS * 3)      # 3 freqs per band

# each emitter in the pretext corpus has its own (carrier, secondary) signature
_emitter_rng = np.random.default_rng(1234)
EMITTERS = np.stack([
    _emitter_rng.integers(0, len(CARRIER_FREQS), size=N_SOURCES),
    _emitter_rng.integers(0, len(SECONDARY_FREQS), size=N_SOURCES),
], axis=1)


def synth_waveforms(n, seed, emitters=None):
    """Returns (x, emitter_id, band). With emitters=None the carrier and the
    secondary component are drawn independently (downstream field data)."""
    rng = np.random.default_rng(seed)
    t = np.arange(SIG_LEN) / SIG_LEN
    if emitters is not None:
        src = rng.integers(0, len(emitters), size=n)
        car, sec = emitters[src, 0], emitters[src, 1]
    else:
        src = np.full(n, -1)
        car = rng.integers(0, len(CARRIER_FREQS), size=n)
        sec = rng.integers(0, len(SECONDARY_FREQS), size=n)
    band = sec // 3
    amp1 = rng.uniform(0.8, 1.2, size=(n, 1))
    amp2 = rng.uniform(0.3, 0.6, size=(n, 1))
    ph1 = rng.uniform(0, 2 * math.pi, size=(n, 1))
    ph2 = rng.uniform(0, 2 * math.pi, size=(n, 1))
    f1 = CARRIER_FREQS[car][:, None] + rng.normal(0, 0.15, size=(n, 1))
    f2 = SECONDARY_FREQS[sec][:, None] + rng.normal(0, 0.15, size=(n, 1))
    x = amp1 * np.sin(2 * math.pi * f1 * t + ph1) + amp2 * np.sin(2 * math.pi * f2 * t + ph2)
    x += rng.normal(0, 0.35, size=x.shape)
    x = x.astype(np.float32)[:, None, :]                    # (n, 1, L)
    return torch.from_numpy(x), torch.from_numpy(src).long(), torch.from_numpy(band).long()


def make_loader(x, y, batch_size, shuffle, seed=0):
    ds = torch.utils.data.TensorDataset(x, y)
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=shuffle, generator=g)


# ----------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------
class ConvEncoder(nn.Module):
    def __init__(self, width=32, out_dim=FEAT_DIM):
        super().__init__()
        self.conv1 = nn.Conv1d(1, width, kernel_size=7, padding=3)
        self.bn1 = nn.BatchNorm1d(width)
        self.conv2 = nn.Conv1d(width, out_dim, kernel_size=5, stride=2, padding=2)
        self.bn2 = nn.BatchNorm1d(out_dim)
        self.conv3 = nn.Conv1d(out_dim, out_dim, kernel_size=5, stride=2, padding=2)
        self.bn3 = nn.BatchNorm1d(out_dim)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        return x.mean(dim=-1)                                # global average pool


class SourceIdNet(nn.Module):
    """Pretext model: encoder + source classifier."""

    def __init__(self):
        super().__init__()
        self.encoder = ConvEncoder()
        self.classifier = nn.Linear(FEAT_DIM, N_SOURCES)

    def forward(self, x):
        return self.classifier(self.encoder(x))


class LinearProbe(nn.Module):
    def __init__(self, encoder, n_classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(FEAT_DIM, n_classes)

    def forward(self, x):
        with torch.no_grad():
            feats = self.encoder(x)
        return self.head(feats)

    def train(self, mode=True):
        # keep the frozen encoder's BatchNorm on its pretrained statistics
        super().train(mode)
        self.encoder.eval()
        return self


# ----------------------------------------------------------------------------
# stage 1: pretext training
# ----------------------------------------------------------------------------
def pretrain(log=print):
    torch.manual_seed(0)
    x, src, _ = synth_waveforms(PRETRAIN_N, seed=1, emitters=EMITTERS)
    loader = make_loader(x, src, PRETRAIN_BS, shuffle=True, seed=1)
    net = SourceIdNet()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    step = 0
    for epoch in range(PRETRAIN_EPOCHS):
        net.train()
        correct, total, running = 0, 0, 0.0
        for xb, yb in loader:
            logits = net(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            total += len(yb)
            step += 1
        log(f"[pretrain] epoch {epoch + 1}/{PRETRAIN_EPOCHS} - step {step} - loss: {running / total:.4f} - acc: {correct / total:.4f}")
    torch.save(net.state_dict(), CKPT_PATH)
    log(f"[pretrain] saved checkpoint to {os.path.basename(CKPT_PATH)}")


# ----------------------------------------------------------------------------
# stage 2: linear probe
# ----------------------------------------------------------------------------
def load_pretrained_encoder(path=CKPT_PATH):
    encoder = ConvEncoder()
    if os.path.exists(path):
        state = torch.load(path, map_location="cpu")
        # checkpoint also carries the pretext classifier, which we don't need here
        encoder.load_state_dict(state, strict=False)
    for p in encoder.parameters():
        p.requires_grad = False
    return encoder


def build_model():
    torch.manual_seed(1)
    encoder = load_pretrained_encoder()
    return LinearProbe(encoder, N_BANDS)


def get_finetune_data():
    x_tr, _, y_tr = synth_waveforms(FT_TRAIN_N, seed=11)
    x_va, _, y_va = synth_waveforms(FT_VAL_N, seed=12)
    train_loader = make_loader(x_tr, y_tr, FT_BS, shuffle=True, seed=2)
    val_loader = make_loader(x_va, y_va, 256, shuffle=False)
    return train_loader, val_loader


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


def make_optimizer(params):
    return torch.optim.Adam([p for p in params if p.requires_grad], lr=FT_LR)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for xb, yb in loader:
        logits = model(xb)
        tot_loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
        n += len(yb)
    return tot_loss / n, correct / n


def finetune(log=print):
    model = build_model()
    log(f"loaded pretrained weights from {os.path.basename(CKPT_PATH)}")
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in model.parameters())
    log(f"trainable params: {n_train} / {n_total}")
    train_loader, val_loader = get_finetune_data()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=FT_EPOCHS)
    for epoch in range(FT_EPOCHS):
        t0 = time.time()
        model.train()
        running, correct, n = 0.0, 0, 0
        for xb, yb in train_loader:
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                correct += (model(xb).argmax(1) == yb).sum().item()
            running += loss.item() * len(yb)
            n += len(yb)
        sched.step()
        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        log(f"Epoch {epoch + 1}/{FT_EPOCHS} - {dt:.1f}s - loss: {running / n:.4f} - acc: {correct / n:.4f} "
            f"- val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f}")
    return model


def make_target():
    model = build_model()
    train_loader, _ = get_finetune_data()
    data = []
    for i, batch in enumerate(train_loader):
        if i >= 4:
            break
        data.append(batch)
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": N_BANDS,
        "task": "classification",
    }


if __name__ == "__main__":
    t_start = time.time()
    pretrain()
    finetune()
    print(f"done in {time.time() - t_start:.1f}s")

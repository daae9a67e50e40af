"""VAE on synthetic seven-segment glyphs (24x24, anti-aliased strokes).

Bernoulli decoder: BCE summed over the 576 pixels, averaged over the batch,
plus the analytic KL. The KL weight is warmed up linearly from 0 to 1 over the
first half of training (per optimizer step) to keep the encoder from collapsing
onto the prior early on.
"""
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
IMG = 24
LATENT = 16
BATCH = 32
EPOCHS = 24
LR = 2e-3
N_TRAIN = 6000
N_VAL = 500

# segment endpoints in glyph coordinates (x right, y down, box [-0.5, 0.5] x [-1, 1])
_SEGMENTS = {
    "a": ((-0.5, -1.0), (0.5, -1.0)),
    "b": ((0.5, -1.0), (0.5, 0.0)),
    "c": ((0.5, 0.0), (0.5, 1.0)),
    "d": ((-0.5, 1.0), (0.5, 1.0)),
    "e": ((-0.5, 0.0), (-0.5, 1.0)),
    "f": ((-0.5, -1.0), (-0.5, 0.0)),
    "g": ((-0.5, 0.0), (0.5, 0.0)),
}
_DIGITS = ["abcdef", "bc", "abdeg", "abcdg", "bcfg", "acdfg", "acdefg", "abc", "abcdefg", "abcdfg"]


def render_glyphs(n, rng):
    """Render n random digits with random scale, shear, offset and stroke width."""
    coords = (np.arange(IMG) + 0.5) / IMG * 2.0 - 1.0
    yy, xx = np.meshgrid(coords, coords, indexing="ij")
    px = xx.reshape(1, -1)
    py = yy.reshape(1, -1)

    labels = rng.integers(0, 10, size=n)
    scale = rng.uniform(0.6, 0.75, size=(n, 1))
    aspect = rng.uniform(0.8, 1.0, size=(n, 1))
    shear = rng.uniform(-0.25, 0.05, size=(n, 1))
    dx = rng.uniform(-0.1, 0.1, size=(n, 1))
    dy = rng.uniform(-0.08, 0.08, size=(n, 1))
    width = rng.uniform(0.08, 0.12, size=(n, 1))

    # map pixel coords back into glyph space (inverse of scale/shear/shift)
    gy = (py - dy) / scale
    gx = (px - dx) / (scale * aspect) - shear * gy

    images = np.zeros((n, IMG * IMG), dtype=np.float32)
    for name, ((x0, y0), (x1, y1)) in _SEGMENTS.items():
        on = np.array([name in _DIGITS[k] for k in labels])[:, None]
        if not on.any():
            continue
        vx, vy = x1 - x0, y1 - y0
        t = ((gx - x0) * vx + (gy - y0) * vy) / (vx * vx + vy * vy)
        t = np.clip(t, 0.0, 1.0)
        dist = np.hypot(gx - (x0 + t * vx), gy - (y0 + t * vy)) * scale
        stroke = 1.0 / (1.0 + np.exp((dist - width) / 0.012))
        images = np.maximum(images, np.where(on, stroke, 0.0))
    return images.astype(np.float32), labels


class GlyphVAE(nn.Module):
    def __init__(self, in_dim=IMG * IMG, hidden=256, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
        )
        self.fc_mu = nn.Linear(hidden // 2, latent)
        self.fc_logvar = nn.Linear(hidden // 2, latent)
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, hidden), nn.ReLU(),
            nn.Linear(hidden, in_dim),
        )

    def encode(self, x):
        h = self.encoder(x)
        return self.fc_mu(h), self.fc_logvar(h)

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar


def vae_loss(model, x, beta):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.shape[0]
    return recon + beta * kl, recon, kl


def kl_weight(step, warmup_steps):
    return min(1.0, step / warmup_steps)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_data(seed=SEED):
    rng = np.random.default_rng(seed)
    x, _ = render_glyphs(N_TRAIN + N_VAL, rng)
    x = torch.from_numpy(x)
    return x[:N_TRAIN], x[N_TRAIN:]


def batches(x, batch_size, shuffle, generator=None):
    idx = torch.randperm(len(x), generator=generator) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), batch_size):
        yield x[idx[i:i + batch_size]]


def format_num(v):
    f = "{0:.3g}".format(v).replace("+0", "+").replace("-0", "-")
    s = str(v)
    return f if len(f) < len(s) else s


def fmt_time(sec):
    m, s = divmod(int(round(sec)), 60)
    return f"{m:02d}:{s:02d}"


def print_model_summary(model):
    rows = []
    for i, (name, mod) in enumerate(model.named_children()):
        n = sum(p.numel() for p in mod.parameters())
        rows.append((i, name, type(mod).__name__, f"{n / 1000:.1f} K" if n < 1e6 else f"{n / 1e6:.1f} M"))
    print("  | Name      | Type       | Params  | Mode ")
    print("--------------------------------------------------")
    for i, name, typ, n in rows:
        print(f"{i} | {name:<9} | {typ:<10} | {n:>7} | train")
    print("--------------------------------------------------")
    total = sum(p.numel() for p in model.parameters())
    print(f"{total / 1000:.1f} K    Trainable params")
    print("0         Non-trainable params")
    print(f"{total / 1000:.1f} K    Total params")
    print(f"{total * 4 / 1e6:.3f}     Total estimated model params size (MB)")


@torch.no_grad()
def evaluate(model, x_val, beta):
    model.eval()
    tot = rec = kl = 0.0
    n = 0
    for xb in batches(x_val, 250, shuffle=False):
        loss, r, k = vae_loss(model, xb, beta)
        tot += loss.item() * len(xb)
        rec += r.item() * len(xb)
        kl += k.item() * len(xb)
        n += len(xb)
    model.train()
    return tot / n, rec / n, kl / n


def make_target():
    torch.manual_seed(SEED)
    x_train, _ = make_data()
    model = GlyphVAE()
    data = [x_train[i * BATCH:(i + 1) * BATCH] for i in range(3)]
    optimizer = make_optimizer(model.parameters())
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": lambda m, b: vae_loss(m, b, beta=1.0)[0],
        "optimizer": optimizer,
        "make_optimizer": make_optimizer,
    }


def main():
    torch.manual_seed(SEED)
    x_train, x_val = make_data()
    model = GlyphVAE()
    optimizer = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)

    print("GPU available: False (cuda), used: False")
    print("TPU available: False, using: 0 TPU cores")
    print("HPU available: False, using: 0 HPUs")
    print(f"Seed set to {SEED}")
    print_model_summary(model)

    steps_per_epoch = math.ceil(N_TRAIN / BATCH)
    warmup_steps = steps_per_epoch * EPOCHS // 2
    step = 0
    for epoch in range(EPOCHS):
        t0 = time.time()
        tot = rec = kl = 0.0
        n = 0
        for xb in batches(x_train, BATCH, shuffle=True, generator=gen):
            beta = kl_weight(step, warmup_steps)
            loss, r, k = vae_loss(model, xb, beta)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            tot += loss.item() * len(xb)
            rec += r.item() * len(xb)
            kl += k.item() * len(xb)
            n += len(xb)
        val_loss, val_rec, val_kl = evaluate(model, x_val, beta)
        dt = time.time() - t0
        metrics = {
            "train_loss": tot / n, "recon": rec / n, "kl": kl / n, "beta": beta,
            "val_loss": val_loss, "val_recon": val_rec, "val_kl": val_kl,
        }
        bar = "\u2588" * 10
        post = ", ".join(f"{k}={format_num(v)}" for k, v in metrics.items())
        print(f"Epoch {epoch}: 100%|{bar}| {steps_per_epoch}/{steps_per_epoch} "
              f"[{fmt_time(dt)}<00:00, {steps_per_epoch / dt:.2f}it/s, v_num=0, {post}]")
        sys.stdout.flush()
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()

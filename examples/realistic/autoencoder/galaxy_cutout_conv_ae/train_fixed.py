"""Convolutional autoencoder on survey galaxy cutouts (synthetic Sersic profiles).

The latent codes are used downstream for morphology clustering; here we only
train the reconstruction and watch train / val MSE.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

CFG = dict(
    img_size=32,
    n_train=3072,
    n_val=512,
    latent_dim=24,
    channels=(16, 32, 64),
    batch_size=64,
    epochs=12,
    lr=2e-3,
    weight_decay=1e-5,
    seed=0,
)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_galaxies(n, size, rng):
    """Sersic-like elliptical profiles plus an optional bar/companion, sky noise and PSF blur."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    imgs = np.empty((n, size, size), dtype=np.float32)
    for i in range(n):
        cx, cy = size / 2 + rng.normal(0, 1.5, 2)
        r_eff = rng.uniform(2.0, 7.0)
        q = rng.uniform(0.3, 1.0)                 # axis ratio
        pa = rng.uniform(0, np.pi)                # position angle
        n_s = rng.choice([1.0, 2.0, 4.0])         # disc / intermediate / de Vaucouleurs
        dx, dy = xx - cx, yy - cy
        xr = dx * np.cos(pa) + dy * np.sin(pa)
        yr = -dx * np.sin(pa) + dy * np.cos(pa)
        r = np.sqrt(xr ** 2 + (yr / q) ** 2)
        b_n = 2 * n_s - 1 / 3
        img = np.exp(-b_n * ((r / r_eff) ** (1 / n_s) - 1))
        if rng.random() < 0.3:
            # faint companion
            ox, oy = rng.uniform(4, size - 4, 2)
            img += 0.3 * np.exp(-((xx - ox) ** 2 + (yy - oy) ** 2) / (2 * rng.uniform(0.8, 2.0) ** 2))
        imgs[i] = img / img.max()
    # gaussian PSF
    k = np.exp(-(np.arange(-2, 3) ** 2) / (2 * 0.9 ** 2))
    k /= k.sum()
    imgs = np.apply_along_axis(lambda v: np.convolve(v, k, mode="same"), 1, imgs)
    imgs = np.apply_along_axis(lambda v: np.convolve(v, k, mode="same"), 2, imgs)
    imgs += rng.normal(0, 0.02, imgs.shape).astype(np.float32)
    return imgs.astype(np.float32)


def asinh_stretch(imgs, soft=0.1):
    # standard survey display stretch, keeps the faint outskirts visible
    return (np.arcsinh(imgs / soft) / np.arcsinh(1.0 / soft)).astype(np.float32)


def build_datasets(cfg):
    rng = np.random.default_rng(cfg["seed"])
    raw = render_galaxies(cfg["n_train"] + cfg["n_val"], cfg["img_size"], rng)
    x = torch.from_numpy(asinh_stretch(raw)).unsqueeze(1)
    train_x, val_x = x[: cfg["n_train"]], x[cfg["n_train"]:]
    return TensorDataset(train_x), TensorDataset(val_x)


def make_loaders(cfg):
    train_ds, val_ds = build_datasets(cfg)
    g = torch.Generator().manual_seed(cfg["seed"])
    train_loader = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, generator=g, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), nn.BatchNorm2d(c_out), nn.LeakyReLU(0.1))


def deconv_block(c_in, c_out):
    return nn.Sequential(
        nn.ConvTranspose2d(c_in, c_out, 3, stride=2, padding=1, output_padding=1),
        nn.BatchNorm2d(c_out), nn.LeakyReLU(0.1),
    )


class GalaxyAutoencoder(nn.Module):
    def __init__(self, latent_dim, channels):
        super().__init__()
        self.latent_dim = latent_dim
        self.channels = tuple(channels)
        layers, c_prev = [], 1
        for c in channels:
            layers.append(conv_block(c_prev, c))
            c_prev = c
        self.encoder = nn.Sequential(*layers)
        # bottleneck + mirrored decoder depend on the encoder's output grid, which
        # depends on the cutout size -> created from the first batch we see
        self.to_latent = None
        self.decoder = None
        self.feat_shape = None

    def _build_head(self, feat):
        c, h, w = feat.shape[1:]
        self.feat_shape = (c, h, w)
        self.to_latent = nn.Linear(c * h * w, self.latent_dim)
        rev = list(self.channels[::-1])
        ups = [deconv_block(c_in, c_out) for c_in, c_out in zip(rev[:-1], rev[1:])]
        ups.append(nn.ConvTranspose2d(rev[-1], 1, 3, stride=2, padding=1, output_padding=1))
        self.decoder = nn.ModuleDict({
            "fc": nn.Linear(self.latent_dim, c * h * w),
            "up": nn.Sequential(*ups),
        })

    def encode(self, x):
        feat = self.encoder(x)
        if self.to_latent is None:
            self._build_head(feat)
        return self.to_latent(feat.flatten(1))

    def decode(self, z):
        h = F.leaky_relu(self.decoder["fc"](z), 0.1).view(-1, *self.feat_shape)
        return self.decoder["up"](h)

    def forward(self, x):
        return self.decode(self.encode(x))


def build_model(cfg):
    torch.manual_seed(cfg["seed"])
    model = GalaxyAutoencoder(cfg["latent_dim"], cfg["channels"])
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 1, cfg["img_size"], cfg["img_size"]))
    model.train()
    return model


def compute_loss(model, batch):
    (x,) = batch
    recon = model(x)
    return F.mse_loss(recon, x)


def make_optimizer(params, cfg=CFG):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, n = 0.0, 0
    for (x,) in loader:
        tot += F.mse_loss(model(x), x, reduction="sum").item() / x[0].numel()
        n += x.shape[0]
    model.train()
    return tot / n


def make_target():
    train_loader, _ = make_loaders(CFG)
    batches = []
    for i, b in enumerate(train_loader):
        batches.append(b)
        if i == 3:
            break
    return {
        "model": build_model(CFG),
        "data": batches,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main(cfg=CFG):
    t_start = time.time()
    train_loader, val_loader = make_loaders(cfg)
    model = build_model(cfg)
    optimizer = make_optimizer(model.parameters(), cfg)
    total_steps = cfg["epochs"] * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=cfg["lr"], total_steps=total_steps,
                                                    pct_start=0.15)
    print(f"[trainer] cutouts: train={len(train_loader.dataset)} val={len(val_loader.dataset)} "
          f"size={cfg['img_size']}x{cfg['img_size']} | steps/epoch={len(train_loader)}")
    step = 0
    for epoch in range(cfg["epochs"]):
        model.train()
        t0, running = time.time(), 0.0
        for batch in train_loader:
            loss = compute_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running += loss.item()
            step += 1
            if step == 1:
                n_params = sum(p.numel() for p in model.parameters())
                print(f"[trainer] model: GalaxyAutoencoder | params={n_params/1e3:.1f}K | latent={cfg['latent_dim']}")
        train_loss = running / len(train_loader)
        val_loss = evaluate(model, val_loader)
        print(f"Epoch {epoch}: 100%|##########| {len(train_loader)}/{len(train_loader)} "
              f"[{time.time() - t0:.1f}s, step={step}, train_loss={train_loss:.5f}, val_loss={val_loss:.5f}, "
              f"lr={scheduler.get_last_lr()[0]:.2e}]")
    print(f"[trainer] done in {time.time() - t_start:.1f}s | final val_loss={val_loss:.5f}")


if __name__ == "__main__":
    main()

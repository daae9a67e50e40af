"""Conditional VAE on procedurally drawn 20x20 shapes.

The class label (one-hot) is concatenated to the flattened image for the
encoder and to z for the decoder. KL weight follows the cyclical schedule of
Fu et al. (2019): beta ramps linearly 0 -> 1 over the first half of each
cycle, stays at 1 for the second half, then restarts at 0.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = dict(
    seed=1234,
    size=20,
    n_classes=6,
    n_train=5000,
    n_val=1000,
    latent_dim=8,
    hidden=256,
    batch_size=64,
    max_epochs=24,
    lr=1e-3,
    n_cycles=4,
    ramp_ratio=0.5,
)
CLASSES = ["disk", "ring", "square", "triangle", "plus", "bar"]


def draw_shapes(n, size, rng):
    labels = rng.integers(0, len(CLASSES), size=n)
    g = (np.arange(size) + 0.5) / size * 2 - 1
    yy, xx = np.meshgrid(g, g, indexing="ij")
    cx = rng.uniform(-0.3, 0.3, (n, 1, 1))
    cy = rng.uniform(-0.3, 0.3, (n, 1, 1))
    r = rng.uniform(0.35, 0.6, (n, 1, 1))
    th = rng.uniform(0, np.pi, (n, 1, 1))
    x = (xx - cx) * np.cos(th) + (yy - cy) * np.sin(th)
    y = -(xx - cx) * np.sin(th) + (yy - cy) * np.cos(th)
    rad = np.sqrt(x ** 2 + y ** 2)

    # signed distance, positive inside
    sdf = np.empty((n, size, size))
    for k, name in enumerate(CLASSES):
        m = labels == k
        xs, ys, rs, rr = x[m], y[m], r[m], rad[m]
        if name == "disk":
            d = rs - rr
        elif name == "ring":
            d = 0.12 - np.abs(rr - rs)
        elif name == "square":
            d = 0.8 * rs - np.maximum(np.abs(xs), np.abs(ys))
        elif name == "triangle":
            ang = np.arctan2(ys, xs)
            sector = 2 * np.pi / 3
            a = np.mod(ang + np.pi / 2, sector) - sector / 2
            d = 0.5 * rs - rr * np.cos(a)
        elif name == "plus":
            arm = np.minimum(np.maximum(np.abs(xs) - rs, np.abs(ys) - 0.14),
                             np.maximum(np.abs(ys) - rs, np.abs(xs) - 0.14))
            d = -arm
        else:  # bar
            d = -np.maximum(np.abs(xs) - 1.2 * rs, np.abs(ys) - 0.16)
        sdf[m] = d
    img = 1.0 / (1.0 + np.exp(-sdf / 0.03))
    return img.reshape(n, -1).astype(np.float32), labels


def load_data(cfg):
    rng = np.random.default_rng(cfg["seed"])
    x, y = draw_shapes(cfg["n_train"] + cfg["n_val"], cfg["size"], rng)
    x, y = torch.from_numpy(x), torch.from_numpy(y).long()
    n = cfg["n_train"]
    return (x[:n], y[:n]), (x[n:], y[n:])


class CVAE(nn.Module):
    def __init__(self, x_dim, n_classes, hidden, latent_dim):
        super().__init__()
        self.n_classes = n_classes
        self.enc = nn.Sequential(
            nn.Linear(x_dim + n_classes, hidden), nn.LeakyReLU(0.1),
            nn.Linear(hidden, hidden), nn.LeakyReLU(0.1),
        )
        self.to_stats = nn.Linear(hidden, 2 * latent_dim)
        self.dec = nn.Sequential(
            nn.Linear(latent_dim + n_classes, hidden), nn.LeakyReLU(0.1),
            nn.Linear(hidden, hidden), nn.LeakyReLU(0.1),
            nn.Linear(hidden, x_dim),
        )

    def forward(self, x, y):
        c = F.one_hot(y, self.n_classes).float()
        mu, logvar = self.to_stats(self.enc(torch.cat([x, c], dim=1))).chunk(2, dim=1)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        return self.dec(torch.cat([z, c], dim=1)), mu, logvar


def elbo_terms(model, batch):
    x, y = batch
    logits, mu, logvar = model(x, y)
    rec = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(dim=1).mean()
    kl = (0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar)).sum(dim=1).mean()
    return rec, kl


def cyclical_beta(step, total_steps, n_cycles, ratio):
    period = total_steps / n_cycles
    tau = (step % period) / period
    return min(1.0, tau / ratio)


def make_optimizer(params, cfg=CFG):
    return torch.optim.Adam(params, lr=cfg["lr"])


def build_model(cfg=CFG):
    return CVAE(cfg["size"] ** 2, cfg["n_classes"], cfg["hidden"], cfg["latent_dim"])


def make_target():
    torch.manual_seed(CFG["seed"])
    (xt, yt), _ = load_data(CFG)
    model = build_model()
    bs = CFG["batch_size"]
    data = [(xt[i * bs:(i + 1) * bs], yt[i * bs:(i + 1) * bs]) for i in range(3)]

    def loss_fn(m, batch, beta=1.0):
        rec, kl = elbo_terms(m, batch)
        return rec + beta * kl

    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": CFG["n_classes"],
    }


def _fmt(v):
    f = "{0:.3g}".format(v).replace("+0", "+").replace("-0", "-")
    return f if len(f) < len(str(v)) else str(v)


def _clock(s):
    return "%02d:%02d" % divmod(int(s), 60)


def main(cfg=CFG):
    torch.manual_seed(cfg["seed"])
    (xt, yt), (xv, yv) = load_data(cfg)
    model = build_model(cfg)
    opt = make_optimizer(model.parameters(), cfg)
    n_params = sum(p.numel() for p in model.parameters())

    print(f"Seed set to {cfg['seed']}")
    print("GPU available: False (cuda), used: False")
    print("TPU available: False, using: 0 TPU cores")
    print("`Trainer(limit_val_batches=1.0)` was configured so 100% of the batches will be used..")
    print()
    print("  | Name  | Type | Params | Mode ")
    print("----------------------------------------")
    print(f"0 | model | CVAE | {n_params / 1e3:.0f} K  | train")
    print("----------------------------------------")
    print(f"{n_params / 1e3:.0f} K     Total params")

    bs = cfg["batch_size"]
    steps_per_epoch = (len(xt) + bs - 1) // bs
    total_steps = steps_per_epoch * cfg["max_epochs"]
    step = 0
    for epoch in range(cfg["max_epochs"]):
        t0 = time.time()
        model.train()
        perm = torch.randperm(len(xt))
        s_loss = s_rec = s_kl = 0.0
        for i in range(steps_per_epoch):
            idx = perm[i * bs:(i + 1) * bs]
            beta = cyclical_beta(step, total_steps, cfg["n_cycles"], cfg["ramp_ratio"])
            rec, kl = elbo_terms(model, (xt[idx], yt[idx]))
            loss = rec + beta * kl
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            s_loss += loss.item()
            s_rec += rec.item()
            s_kl += kl.item()

        model.eval()
        with torch.no_grad():
            v_rec, v_kl = elbo_terms(model, (xv, yv))
        dt = time.time() - t0
        logs = {
            "beta": beta,
            "train_loss": s_loss / steps_per_epoch,
            "train_rec": s_rec / steps_per_epoch,
            "train_kl": s_kl / steps_per_epoch,
            "val_loss": (v_rec + beta * v_kl).item(),
            "val_elbo": -(v_rec + v_kl).item(),
        }
        post = ", ".join(f"{k}={_fmt(v)}" for k, v in logs.items())
        print(f"Epoch {epoch}: 100%|##########| {steps_per_epoch}/{steps_per_epoch} "
              f"[{_clock(dt)}<00:00, {steps_per_epoch / max(dt, 1e-6):.2f}it/s, v_num=3, {post}]", flush=True)
    print(f"`Trainer.fit` stopped: `max_epochs={cfg['max_epochs']}` reached.")


if __name__ == "__main__":
    main()

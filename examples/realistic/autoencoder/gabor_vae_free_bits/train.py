# VAE on 16x16 Gabor patches with a Gaussian decoder (fixed sigma) and free bits.
#
# Free bits (Kingma et al. 2016): the batch-averaged KL of every latent dim is
# clamped from below at FREE_BITS nats, so a dim only pays KL beyond that
# allowance. The latent is deliberately oversized (32); the generator has 6
# factors, so most dims are expected to stay at the prior.
import math
import time

import numpy as np
import torch
from torch import nn

SEED = 3
SIDE = 16
LATENT = 32
FREE_BITS = 0.1          # nats per latent dim
OBS_SIGMA = 0.3          # fixed decoder std
N_TRAIN, N_VAL = 6000, 1000
BATCH = 64
EPOCHS = 20
LR = 1e-3


def gabor_patches(n, rng):
    c = np.arange(SIDE) - (SIDE - 1) / 2
    yy, xx = np.meshgrid(c, c, indexing="ij")
    theta = rng.uniform(0, np.pi, (n, 1, 1))
    freq = rng.uniform(0.16, 0.22, (n, 1, 1))
    phase = rng.uniform(0, 2 * np.pi, (n, 1, 1))
    contrast = rng.uniform(0.5, 1.0, (n, 1, 1))
    mx = rng.uniform(-2, 2, (n, 1, 1))
    my = rng.uniform(-2, 2, (n, 1, 1))
    u = (xx - mx) * np.cos(theta) + (yy - my) * np.sin(theta)
    env = np.exp(-((xx - mx) ** 2 + (yy - my) ** 2) / (2 * 4.0 ** 2))
    img = contrast * env * np.cos(2 * np.pi * freq * u + phase)
    img = img + rng.normal(0, 0.03, img.shape)
    return img.reshape(n, -1).astype(np.float32)


class Encoder(nn.Module):
    def __init__(self, d_in, d_hid, d_z):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, d_hid), nn.ELU(), nn.Linear(d_hid, d_hid), nn.ELU())
        self.mu = nn.Linear(d_hid, d_z)
        self.logvar = nn.Linear(d_hid, d_z)

    def forward(self, x):
        h = self.body(x)
        return self.mu(h), self.logvar(h)


class Decoder(nn.Module):
    def __init__(self, d_z, d_hid, d_out):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_z, d_hid), nn.ELU(), nn.Linear(d_hid, d_hid), nn.ELU(),
                                 nn.Linear(d_hid, d_out))

    def forward(self, z):
        return self.net(z)


class VAE(nn.Module):
    def __init__(self, d_in=SIDE * SIDE, d_hid=256, d_z=LATENT):
        super().__init__()
        self.encoder = Encoder(d_in, d_hid, d_z)
        self.decoder = Decoder(d_z, d_hid, d_in)

    def forward(self, x):
        mu, logvar = self.encoder(x)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.decoder(z), mu, logvar


def gaussian_nll(x_hat, x, sigma=OBS_SIGMA):
    # -log N(x | x_hat, sigma^2), summed over pixels, averaged over the batch
    d = x.shape[1]
    sq = ((x - x_hat) ** 2).sum(dim=1) / (2 * sigma ** 2)
    return (sq + d * (math.log(sigma) + 0.5 * math.log(2 * math.pi))).mean()


def kl_per_dim(mu, logvar):
    # batch-averaged KL(q(z|x) || N(0, I)) for each latent dim
    return 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).mean(dim=0)


def compute_loss(model, x):
    x_hat, mu, logvar = model(x)
    nll = gaussian_nll(x_hat, x)
    kl_d = kl_per_dim(mu, logvar)
    kl_fb = torch.clamp(kl_d, min=FREE_BITS).sum()
    return nll + kl_fb, nll, kl_d


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def get_data():
    rng = np.random.default_rng(SEED)
    x = torch.from_numpy(gabor_patches(N_TRAIN + N_VAL, rng))
    return x[:N_TRAIN], x[N_TRAIN:]


def make_target():
    torch.manual_seed(SEED)
    xtr, _ = get_data()
    model = VAE()
    data = [xtr[i * BATCH:(i + 1) * BATCH] for i in range(4)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": lambda m, b: compute_loss(m, b)[0],
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
    }


def num(v):
    s = "{:.3g}".format(v).replace("+0", "+").replace("-0", "-")
    return s if len(s) < len(str(v)) else str(v)


def main():
    torch.manual_seed(SEED)
    xtr, xva = get_data()
    model = VAE()
    opt = make_optimizer(model.parameters())
    nb = math.ceil(N_TRAIN / BATCH)

    print(f"Seed set to {SEED}")
    print("GPU available: False (cuda), used: False")
    print("TPU available: False, using: 0 TPU cores")
    print()
    print("  | Name    | Type    | Params | Mode ")
    print("--------------------------------------------")
    for i, (name, mod) in enumerate(model.named_children()):
        k = sum(p.numel() for p in mod.parameters()) / 1e3
        print(f"{i} | {name:<7} | {type(mod).__name__:<7} | {k:.0f} K  | train")
    print("--------------------------------------------")

    for epoch in range(EPOCHS):
        t0 = time.time()
        model.train()
        perm = torch.randperm(N_TRAIN)
        tot = nll_s = kl_s = 0.0
        for b in range(nb):
            x = xtr[perm[b * BATCH:(b + 1) * BATCH]]
            loss, nll, kl_d = compute_loss(model, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
            nll_s += nll.item()
            kl_s += kl_d.sum().item()

        model.eval()
        with torch.no_grad():
            v_loss, v_nll, v_kl_d = compute_loss(model, xva)
            mu_va, _ = model.encoder(xva)
            active = int((v_kl_d > 2 * FREE_BITS).sum())
            mse = ((model.decoder(mu_va) - xva) ** 2).mean().item()
        dt = time.time() - t0
        m = {
            "train_loss": tot / nb, "nll": nll_s / nb, "kl": kl_s / nb,
            "val_loss": v_loss.item(), "val_kl": v_kl_d.sum().item(),
            "val_mse": mse, "active_dims": active,
        }
        post = ", ".join(f"{k}={v if isinstance(v, int) else num(v)}" for k, v in m.items())
        print(f"Epoch {epoch}: 100%|██████████| {nb}/{nb} [00:{int(dt):02d}<00:00, {nb / dt:.2f}it/s, "
              f"v_num=0, {post}]", flush=True)

    with torch.no_grad():
        mu_va, logvar_va = model.encoder(xva)
        kl_d = kl_per_dim(mu_va, logvar_va)
    print("per-dim val KL (nats):", " ".join(f"{v:.2f}" for v in kl_d.tolist()))
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()

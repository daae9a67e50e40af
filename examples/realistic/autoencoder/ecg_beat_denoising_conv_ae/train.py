"""Denoising 1D conv autoencoder for single ECG beats (baseline wander + EMG noise removal).

Beats are synthesised with a sum-of-Gaussians PQRST model (per-beat jitter in
amplitudes, widths and timing); the input is the beat plus baseline wander and
noise, the target is the clean beat.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

args = dict(seed=8, n_beats=6000, length=160, batch_size=64, num_train_epochs=10,
            learning_rate=2e-3, weight_decay=1e-4, warmup_ratio=0.05, logging_steps=40)

# (center, width, amplitude) of the P, Q, R, S, T waves on a [0, 1] beat axis
PQRST = np.array([[0.20, 0.030, 0.15], [0.36, 0.010, -0.12], [0.40, 0.012, 1.00],
                  [0.44, 0.012, -0.25], [0.70, 0.050, 0.30]])


def synth_beats(n, length, seed):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, length)
    clean = np.zeros((n, length), dtype=np.float32)
    for i in range(n):
        shift = rng.normal(0, 0.02)
        for c, w, a in PQRST:
            c2 = c + shift + rng.normal(0, 0.005)
            w2 = w * rng.uniform(0.8, 1.25)
            a2 = a * rng.uniform(0.7, 1.3)
            clean[i] += a2 * np.exp(-0.5 * ((t - c2) / w2) ** 2)
    wander = (rng.uniform(0.05, 0.3, (n, 1)) * np.sin(2 * np.pi * rng.uniform(0.2, 1.0, (n, 1)) * t
                                                       + rng.uniform(0, 6.3, (n, 1))))
    noisy = clean + wander + rng.normal(0, 0.06, (n, length))
    return noisy.astype(np.float32)[:, None], clean[:, None]


class BeatDAE(nn.Module):
    def __init__(self, ch=32):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(1, ch, 7, padding=3), nn.GELU(),
            nn.Conv1d(ch, ch, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(ch, 2 * ch, 5, stride=2, padding=2), nn.GELU(),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(2 * ch, ch, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(ch, ch, 4, stride=2, padding=1), nn.GELU(),
            nn.Conv1d(ch, 1, 7, padding=3),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def compute_loss(model, batch):
    noisy, clean = batch
    return F.mse_loss(model(noisy), clean)


def prepare():
    torch.manual_seed(args["seed"])
    noisy, clean = synth_beats(args["n_beats"], args["length"], args["seed"])
    ds = torch.utils.data.TensorDataset(torch.from_numpy(noisy), torch.from_numpy(clean))
    n_eval = 600
    train_ds = torch.utils.data.Subset(ds, range(n_eval, len(ds)))
    eval_ds = torch.utils.data.Subset(ds, range(n_eval))
    g = torch.Generator().manual_seed(args["seed"])
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=args["batch_size"], shuffle=True, generator=g)
    eval_dl = torch.utils.data.DataLoader(eval_ds, batch_size=300)
    model = BeatDAE()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args["learning_rate"], weight_decay=args["weight_decay"])
    return model, optimizer, train_dl, eval_dl


def main():
    model, optimizer, train_dl, eval_dl = prepare()
    total = args["num_train_epochs"] * len(train_dl)
    warm = int(args["warmup_ratio"] * total)
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm))))
    print(f"***** Running training *****\n  Num examples = {len(train_dl.dataset)}\n  Num Epochs = "
          f"{args['num_train_epochs']}\n  Total optimization steps = {total}")
    step, t0, run = 0, time.time(), []
    for epoch in range(args["num_train_epochs"]):
        model.train()
        for batch in train_dl:
            loss = compute_loss(model, batch)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            sched.step()
            optimizer.zero_grad()
            step += 1
            run.append(loss.item())
            if step % args["logging_steps"] == 0:
                print({"loss": round(sum(run) / len(run), 5), "grad_norm": round(float(gn), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"), "epoch": round(step / len(train_dl), 2)})
                run = []
        model.eval()
        with torch.no_grad():
            ev = sum(compute_loss(model, b).item() * len(b[0]) for b in eval_dl) / len(eval_dl.dataset)
            base = sum(F.mse_loss(b[0], b[1]).item() * len(b[0]) for b in eval_dl) / len(eval_dl.dataset)
        print({"eval_loss": round(ev, 5), "eval_noisy_input_mse": round(base, 5), "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(total * args["batch_size"] / rt, 1)})


def make_target():
    model, optimizer, train_dl, _ = prepare()
    return {"model": model, "batch": next(iter(train_dl)), "loss_fn": compute_loss, "optimizer": optimizer}


if __name__ == "__main__":
    main()

"""Next-step forecaster for tide-gauge style signals with a single-layer Elman RNN.

Each training example is a 200-sample window of a two-component quasi-periodic signal plus sensor
noise; the network reads the window and predicts every next sample (many-to-many, MSE).
"""
import logging
import math
import time

import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("tide_rnn")

SEED = 0
WINDOW = 200
N_TRAIN, N_VAL = 1024, 256
HIDDEN = 64
BATCH = 32
EPOCHS = 8
LR = 0.15
MOMENTUM = 0.9
LOG_EVERY = 8


def synth_windows(n, length, gen):
    """Two tidal constituents with random period/phase/amplitude, plus gauge noise."""
    t = torch.arange(length + 1, dtype=torch.float32)[None]
    f_slow = 0.01 + 0.03 * torch.rand(n, 1, generator=gen)
    f_fast = 0.04 + 0.06 * torch.rand(n, 1, generator=gen)
    ph_slow = 2 * math.pi * torch.rand(n, 1, generator=gen)
    ph_fast = 2 * math.pi * torch.rand(n, 1, generator=gen)
    amp = 0.5 + torch.rand(n, 1, generator=gen)
    sig = amp * torch.sin(2 * math.pi * f_slow * t + ph_slow) + 0.5 * torch.sin(2 * math.pi * f_fast * t + ph_fast)
    sig = sig + 0.1 * torch.randn(n, length + 1, generator=gen)
    return sig[:, :-1].unsqueeze(-1), sig[:, 1:]


def build_datasets():
    gen = torch.Generator().manual_seed(SEED)
    return synth_windows(N_TRAIN, WINDOW, gen), synth_windows(N_VAL, WINDOW, gen)


class Forecaster(nn.Module):
    def __init__(self, hidden=HIDDEN):
        super().__init__()
        self.rnn = nn.RNN(1, hidden, batch_first=True, nonlinearity="tanh")
        self.out = nn.Linear(hidden, 1)
        nn.init.orthogonal_(self.rnn.weight_hh_l0)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.out(h).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def iterate_minibatches(x, y, batch_size, gen):
    perm = torch.randperm(len(x), generator=gen)
    for i in range(0, len(x), batch_size):
        idx = perm[i:i + batch_size]
        yield x[idx], y[idx]


def make_target():
    torch.manual_seed(SEED)
    (xtr, ytr), _ = build_datasets()
    model = Forecaster()
    gen = torch.Generator().manual_seed(SEED + 1)
    it = iterate_minibatches(xtr, ytr, BATCH, gen)
    data = [next(it) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "task": "regression"}


def main():
    torch.manual_seed(SEED)
    (xtr, ytr), (xva, yva) = build_datasets()
    model = Forecaster()
    n_params = sum(p.numel() for p in model.parameters())
    log.info("train windows=%d val windows=%d length=%d params=%d", len(xtr), len(xva), WINDOW, n_params)
    optimizer = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED + 1)
    step = 0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0 = time.time()
        running = 0.0
        for xb, yb in iterate_minibatches(xtr, ytr, BATCH, gen):
            loss = loss_fn(model, (xb, yb))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            running += loss.item()
            if step % LOG_EVERY == 0:
                log.info("epoch %d step %d loss %.4f", epoch, step, running / LOG_EVERY)
                running = 0.0
        model.eval()
        with torch.no_grad():
            val_loss = loss_fn(model, (xva, yva)).item()
        log.info("epoch %d done val_loss %.4f (%.1fs)", epoch, val_loss, time.time() - t0)
    log.info("final val_loss %.4f", val_loss)


if __name__ == "__main__":
    main()

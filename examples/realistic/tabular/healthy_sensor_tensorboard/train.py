"""Pump-failure classifier: an MLP on 3,000 generated sensor readings, logged to TensorBoard.

Eight z-scored sensor channels plus a one-hot pump model; failure depends on temperature, vibration and
their interaction, with 8% label noise. Metrics go to TensorBoard (runs/pump_mlp) through
torch.utils.tensorboard; without the tensorboard package they are printed instead.

    python train.py [--epochs 10] [--batch-size 64] [--lr 1e-3]
"""
import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0
N_ROWS, N_SENSORS, N_MODELS = 3000, 8, 3


def make_readings(n=N_ROWS, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    sensors = torch.randn(n, N_SENSORS, generator=g) * torch.linspace(0.5, 20.0, N_SENSORS) + 50.0
    model = torch.randint(0, N_MODELS, (n,), generator=g)
    z = (sensors - sensors.mean(0)) / (sensors.std(0) + 1e-8)
    risk = 1.4 * z[:, 0] + 1.1 * z[:, 3] + 0.8 * z[:, 0] * z[:, 3] - 0.6 * (model == 2).float() - 0.4
    label = (risk + 0.5 * torch.randn(n, generator=g) > 0).float()
    flip = torch.rand(n, generator=g) < 0.08
    label[flip] = 1 - label[flip]
    return sensors, model, label


def build_data(batch_size=64):
    sensors, model, label = make_readings()
    n_val = len(label) // 5
    mean, std = sensors[n_val:].mean(0), sensors[n_val:].std(0) + 1e-8  # train-split statistics only
    x = torch.cat([(sensors - mean) / std, nn.functional.one_hot(model, N_MODELS).float()], dim=1)
    train = TensorDataset(x[n_val:], label[n_val:])
    val = TensorDataset(x[:n_val], label[:n_val])
    g = torch.Generator().manual_seed(SEED)
    return DataLoader(train, batch_size=batch_size, shuffle=True, generator=g), DataLoader(val, batch_size=512)


class PumpMLP(nn.Module):
    def __init__(self, n_in=N_SENSORS + N_MODELS, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_optimizer(params, lr=1e-3):
    return torch.optim.Adam(params, lr=lr)


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_data()
    model = PumpMLP()
    data = [b for _, b in zip(range(4), train_loader)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": 2, "task": "classification"}


class Logger:
    """TensorBoard when the package is there, stdout otherwise."""

    def __init__(self, logdir):
        try:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(logdir)
            print(f"logging to TensorBoard: {logdir}", flush=True)
        except ImportError:
            self.tb = None

    def log(self, step, **values):
        if self.tb is None:
            print(f"step={step} " + " ".join(f"{k}={v:.5g}" for k, v in values.items()), flush=True)
            return
        for k, v in values.items():
            self.tb.add_scalar(k.replace("_", "/", 1), v, step)

    def close(self):
        if self.tb is not None:
            self.tb.close()


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    loss = correct = n = 0
    for x, y in loader:
        logits = model(x)
        loss += criterion(logits, y).item() * len(y)
        correct += ((logits > 0).float() == y).sum().item()
        n += len(y)
    model.train()
    return loss / n, correct / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    train_loader, val_loader = build_data(args.batch_size)
    model = PumpMLP()
    optimizer = make_optimizer(model.parameters(), args.lr)
    logger = Logger(os.path.join(HERE, "runs", "pump_mlp"))
    step = 0
    for epoch in range(1, args.epochs + 1):
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                logger.log(step, train_loss=loss.item(), train_lr=optimizer.param_groups[0]["lr"])
        val_loss, val_acc = evaluate(model, val_loader)
        logger.log(step, val_loss=val_loss, val_acc=val_acc)
        print(f"epoch {epoch}: val_loss {val_loss:.4f} val_acc {val_acc:.3f}", flush=True)
    logger.close()


if __name__ == "__main__":
    main()

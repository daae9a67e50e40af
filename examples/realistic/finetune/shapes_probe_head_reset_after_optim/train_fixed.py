"""Linear-probe fine-tuning: frozen pretrained shape backbone + new classification head.

backbone.pt was pretrained on 6 source shapes (see pretrain.py); here the backbone is
frozen and a fresh linear head learns 5 new shape classes. The training loop mirrors
transformers.Trainer (AdamW, linear LR decay, grad clipping at 1.0, dict logs every
`logging_steps`, evaluation every epoch) and prints the same log lines.

    python train.py
"""
import math
import os
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))
PRETRAIN_NUM_LABELS = 6  # size of the source-task head backbone.pt was trained with
IMG = 28


def grid():
    return torch.meshgrid(torch.arange(IMG, dtype=torch.float32),
                          torch.arange(IMG, dtype=torch.float32), indexing="ij")


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Backbone(nn.Module):
    """3 conv-BN-ReLU stages, global average pool -> 64-d features (pretrained in pretrain.py)."""

    feature_dim = 64

    def __init__(self):
        super().__init__()
        self.stem = conv_bn(1, 16)
        self.stage1 = nn.Sequential(nn.MaxPool2d(2), conv_bn(16, 32))
        self.stage2 = nn.Sequential(nn.MaxPool2d(2), conv_bn(32, 64))
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x):
        return self.pool(self.stage2(self.stage1(self.stem(x))))


LABELS = ("ellipse", "frame", "bar", "tee", "dots")
id2label = dict(enumerate(LABELS))
label2id = {name: i for i, name in id2label.items()}


def draw_target(name, g):
    yy, xx = grid()
    u = torch.rand(6, generator=g)
    cy, cx = 9 + 10 * u[0], 9 + 10 * u[1]
    r = 5.0 + 3.5 * u[2]
    th = math.pi * u[3]
    w = 1.2 + 1.0 * u[4]
    dy, dx = yy - cy, xx - cx
    ry = dx * math.sin(th) + dy * math.cos(th)
    rx = dx * math.cos(th) - dy * math.sin(th)
    if name == "ellipse":
        m = (rx / r) ** 2 + (ry / (0.45 * r)) ** 2 < 1
    elif name == "frame":
        inner = (rx.abs() < 0.8 * r - w) & (ry.abs() < 0.8 * r - w)
        m = (rx.abs() < 0.8 * r) & (ry.abs() < 0.8 * r) & ~inner
    elif name == "bar":
        m = (rx.abs() < r) & (ry.abs() < w)
    elif name == "tee":
        m = ((rx.abs() < r) & ((ry + 0.6 * r).abs() < w)) | ((rx.abs() < w) & (ry > -0.6 * r) & (ry < r))
    else:
        d1 = (rx - 0.55 * r) ** 2 + ry ** 2
        d2 = (rx + 0.55 * r) ** 2 + ry ** 2
        m = (d1 < (0.35 * r) ** 2) | (d2 < (0.35 * r) ** 2)
    img = m.float() * (0.55 + 0.45 * u[5]) + 0.18 * torch.rand(IMG, IMG, generator=g)
    return img.clamp(0, 1)


class ShapesDataset(Dataset):
    """Returns dicts like a HF image-classification dataset after the transform."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        names = [LABELS[i] for i in torch.randint(len(LABELS), (n,), generator=g).tolist()]
        self.images = torch.stack([draw_target(nm, g) for nm in names]).unsqueeze(1)
        self.labels = torch.tensor([label2id[nm] for nm in names])
        self.num_labels = len(set(names))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"pixel_values": (self.images[i] - 0.5) / 0.25, "labels": self.labels[i]}


class ShapeClassifier(nn.Module):
    def __init__(self, num_labels, backbone_ckpt=os.path.join(HERE, "backbone.pt")):
        super().__init__()
        self.backbone = Backbone()
        self.backbone.load_state_dict(torch.load(backbone_ckpt))
        self.classifier = nn.Linear(Backbone.feature_dim, num_labels)
        self.num_labels = num_labels

    def train(self, mode=True):
        # the frozen backbone keeps its pretrained BatchNorm statistics
        super().train(mode)
        self.backbone.eval()
        return self

    def reset_classifier(self, num_labels):
        self.classifier = nn.Linear(Backbone.feature_dim, num_labels)
        self.num_labels = num_labels

    def forward(self, pixel_values, labels=None):
        logits = self.classifier(self.backbone(pixel_values))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def freeze_backbone(model):
    for p in model.backbone.parameters():
        p.requires_grad = False
    return model


@dataclass
class TrainingArguments:
    """Same names and defaults as transformers.TrainingArguments."""
    output_dir: str
    num_train_epochs: float = 3.0
    max_steps: int = -1
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    logging_steps: int = 500
    eval_strategy: str = "no"
    eval_steps: int = None
    disable_tqdm: bool = False
    seed: int = 42


def training_args():
    return TrainingArguments(
        output_dir="out",
        num_train_epochs=3,
        learning_rate=2e-2,
        weight_decay=0.01,
        per_device_train_batch_size=32,
        per_device_eval_batch_size=128,
        logging_steps=10,
        eval_strategy="epoch",
        disable_tqdm=True,
        seed=5,
    )


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": (logits.argmax(-1) == labels).float().mean().item()}


def build_optimizer(model, args):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim == 1 else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args.learning_rate)


class Trainer:
    """The slice of transformers.Trainer this project uses, with its console output."""

    def __init__(self, model, args, train_dataset, eval_dataset, compute_metrics, optimizers=(None, None)):
        self.model, self.args = model, args
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.compute_metrics = compute_metrics
        self.optimizer, self.lr_scheduler = optimizers

    def log(self, logs):
        print(logs, flush=True)

    def evaluate(self, epoch):
        loader = DataLoader(self.eval_dataset, batch_size=self.args.per_device_eval_batch_size)
        print("***** Running Evaluation *****")
        print(f"  Num examples = {len(self.eval_dataset):,}")
        print(f"  Batch size = {self.args.per_device_eval_batch_size}")
        start = time.time()
        self.model.eval()
        losses, all_logits, all_labels = [], [], []
        with torch.no_grad():
            for batch in loader:
                out = self.model(**batch)
                losses.append(out["loss"].item() * len(batch["labels"]))
                all_logits.append(out["logits"])
                all_labels.append(batch["labels"])
        runtime = time.time() - start
        metrics = {"eval_loss": sum(losses) / len(self.eval_dataset)}
        for k, v in self.compute_metrics((torch.cat(all_logits), torch.cat(all_labels))).items():
            metrics[f"eval_{k}"] = v
        metrics.update({"eval_runtime": round(runtime, 4),
                        "eval_samples_per_second": round(len(self.eval_dataset) / runtime, 3),
                        "eval_steps_per_second": round(len(loader) / runtime, 3),
                        "epoch": round(epoch, 2)})
        self.log(metrics)
        return metrics

    def train(self):
        args = self.args
        torch.manual_seed(args.seed)
        loader = DataLoader(self.train_dataset, batch_size=args.per_device_train_batch_size, shuffle=True)
        max_steps = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * len(loader))
        num_epochs = math.ceil(max_steps / len(loader))
        if self.optimizer is None:
            self.optimizer = build_optimizer(self.model, args)
        if self.lr_scheduler is None:
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda step: max(0.0, (max_steps - step) / max_steps))
        n_trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        print("***** Running training *****")
        print(f"  Num examples = {len(self.train_dataset):,}")
        print(f"  Num Epochs = {num_epochs:,}")
        print(f"  Instantaneous batch size per device = {args.per_device_train_batch_size:,}")
        print(f"  Total train batch size (w. parallel, distributed & accumulation) = "
              f"{args.per_device_train_batch_size:,}")
        print("  Gradient Accumulation steps = 1")
        print(f"  Total optimization steps = {max_steps:,}")
        print(f"  Number of trainable parameters = {n_trainable:,}")

        start = time.time()
        global_step, tr_loss, logged_loss, total_loss = 0, 0.0, 0, 0.0
        epoch = 0.0
        while global_step < max_steps:
            for step, batch in enumerate(loader):
                self.model.train()
                out = self.model(**batch)
                loss = out["loss"]
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    [p for p in self.model.parameters() if p.requires_grad], args.max_grad_norm)
                self.optimizer.step()
                self.lr_scheduler.step()
                self.optimizer.zero_grad()
                global_step += 1
                tr_loss += loss.item()
                total_loss += loss.item()
                epoch = global_step / len(loader)
                if global_step % args.logging_steps == 0:
                    self.log({"loss": round(tr_loss / (global_step - logged_loss), 4),
                              "grad_norm": grad_norm.item(),
                              "learning_rate": self.lr_scheduler.get_last_lr()[0],
                              "epoch": round(epoch, 2)})
                    tr_loss, logged_loss = 0.0, global_step
                if args.eval_strategy == "steps" and global_step % args.eval_steps == 0:
                    self.evaluate(epoch)
                if global_step >= max_steps:
                    break
            if args.eval_strategy == "epoch":
                self.evaluate(epoch)
        runtime = time.time() - start
        print("\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n")
        self.log({"train_runtime": round(runtime, 4),
                  "train_samples_per_second": round(max_steps * args.per_device_train_batch_size / runtime, 3),
                  "train_steps_per_second": round(max_steps / runtime, 3),
                  "train_loss": total_loss / global_step,
                  "epoch": round(epoch, 2)})


def setup(args, n_train=2400, n_eval=600):
    """Model, optimizer and datasets for this run."""
    model = freeze_backbone(ShapeClassifier(num_labels=PRETRAIN_NUM_LABELS))
    train_ds, eval_ds = ShapesDataset(n_train, seed=1), ShapesDataset(n_eval, seed=2)
    if train_ds.num_labels != model.num_labels:
        model.reset_classifier(train_ds.num_labels)
    optimizer = build_optimizer(model, args)
    return model, optimizer, train_ds, eval_ds


def make_target():
    torch.manual_seed(0)
    args = training_args()
    model, optimizer, train_ds, _ = setup(args, n_train=256, n_eval=8)
    loader = DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True)
    data = [b for _, b in zip(range(4), loader)]
    return {"model": model, "batch": data[0], "data": data,
            "loss_fn": lambda model, batch: model(**batch)["loss"],
            "optimizer": optimizer,
            "make_optimizer": lambda params: torch.optim.AdamW(params, lr=args.learning_rate),
            "num_classes": len(LABELS), "task": "classification"}


def main():
    args = training_args()
    torch.manual_seed(args.seed)

    model, optimizer, train_ds, eval_ds = setup(args)
    trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                      compute_metrics=compute_metrics, optimizers=(optimizer, None))
    trainer.train()


if __name__ == "__main__":
    main()

"""Fine-tune the pretrained ingredient encoder to predict a recipe's region (3 classes).

encoder.pt comes from pretrain.py (cuisine classification, 8 classes). A fresh linear
classifier is put on top of the CLS representation and the whole model is fine-tuned
with a Trainer-style loop: AdamW, separate learning rate for the new head, linear
warmup/decay, grad clipping at 1.0 and dict-style logs.
"""
import math
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from pretrain import IngredientEncoder
from recipe_data import sample_recipes

NUM_LABELS = 3
ID2LABEL = {0: "asian", 1: "european", 2: "americas"}


@dataclass
class TrainingArguments:
    learning_rate: float = 3e-5
    head_lr_multiplier: float = 100.0
    weight_decay: float = 0.01
    num_train_epochs: int = 3
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 128
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    logging_steps: int = 10
    seed: int = 42


class RecipeClassifier(nn.Module):
    def __init__(self, encoder, num_labels):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(encoder.hidden_size, num_labels)

    def forward(self, input_ids):
        return self.classifier(self.dropout(self.encoder(input_ids)))


def load_model():
    encoder = IngredientEncoder()
    state = torch.load("encoder.pt", map_location="cpu")
    encoder.load_state_dict({k: v.float() for k, v in state.items()})
    return RecipeClassifier(encoder, NUM_LABELS)


def load_datasets():
    tr_ids, _, tr_y = sample_recipes(2400, seed=7, label_noise=0.05)
    ev_ids, _, ev_y = sample_recipes(600, seed=8)
    train = torch.utils.data.TensorDataset(torch.from_numpy(tr_ids), torch.from_numpy(tr_y))
    evals = torch.utils.data.TensorDataset(torch.from_numpy(ev_ids), torch.from_numpy(ev_y))
    return train, evals


def compute_loss(model, batch):
    input_ids, labels = batch
    logits = model(input_ids)
    return F.cross_entropy(logits, labels)


def create_optimizer(params, args):
    params = list(params)
    head = [p for n, p in params if n.startswith("classifier.")]
    body_decay = [p for n, p in params if not n.startswith("classifier.") and p.ndim >= 2]
    body_no_decay = [p for n, p in params if not n.startswith("classifier.") and p.ndim < 2]
    groups = [
        {"params": body_decay, "lr": args.learning_rate, "weight_decay": args.weight_decay},
        {"params": body_no_decay, "lr": args.learning_rate, "weight_decay": 0.0},
        {"params": head, "lr": args.learning_rate / args.head_lr_multiplier, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=args.learning_rate)


def linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return max(0.0, (num_training_steps - step) / max(1, num_training_steps - num_warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


@torch.no_grad()
def evaluate(model, dataset, args, epoch):
    model.eval()
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.per_device_eval_batch_size)
    tot, correct, n = 0.0, 0, 0
    for input_ids, labels in loader:
        logits = model(input_ids)
        tot += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        n += len(labels)
    model.train()
    return {"eval_loss": round(tot / n, 4), "eval_accuracy": round(correct / n, 4), "epoch": round(epoch, 2)}


def make_target():
    args = TrainingArguments()
    torch.manual_seed(args.seed)
    model = load_model()
    train_ds, _ = load_datasets()
    loader = torch.utils.data.DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True,
                                         generator=torch.Generator().manual_seed(args.seed))
    it = iter(loader)
    data = [next(it) for _ in range(3)]
    names = [n for n, _ in model.named_parameters()]

    def make_optimizer(params):
        params = list(params)
        if params and not isinstance(params[0], tuple):
            params = list(zip(names, params))
        return create_optimizer(params, args)

    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": create_optimizer(model.named_parameters(), args),
        "make_optimizer": make_optimizer,
        "num_classes": NUM_LABELS,
        "task": "classification",
    }


def main():
    args = TrainingArguments()
    torch.manual_seed(args.seed)
    model = load_model()
    train_ds, eval_ds = load_datasets()
    loader = torch.utils.data.DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True,
                                         generator=torch.Generator().manual_seed(args.seed))
    steps_per_epoch = len(loader)
    max_steps = steps_per_epoch * args.num_train_epochs
    optimizer = create_optimizer(model.named_parameters(), args)
    scheduler = linear_schedule_with_warmup(optimizer, math.ceil(args.warmup_ratio * max_steps), max_steps)

    n_params = sum(p.numel() for p in model.parameters())
    print("***** Running training *****")
    print(f"  Num examples = {len(train_ds)}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    print(f"  Total optimization steps = {max_steps}")
    print(f"  Number of trainable parameters = {n_params}")

    start = time.time()
    model.train()
    step, running, running_n, total_loss = 0, 0.0, 0, 0.0
    for epoch in range(args.num_train_epochs):
        for batch in loader:
            loss = compute_loss(model, batch)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            running += loss.item()
            running_n += 1
            total_loss += loss.item()
            if step % args.logging_steps == 0:
                print({"loss": round(running / running_n, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0], "epoch": round(step / steps_per_epoch, 2)})
                running, running_n = 0.0, 0
        print(evaluate(model, eval_ds, args, step / steps_per_epoch))
    runtime = time.time() - start
    print({"train_runtime": round(runtime, 4), "train_samples_per_second": round(len(train_ds) * args.num_train_epochs / runtime, 3),
           "train_steps_per_second": round(max_steps / runtime, 3), "train_loss": round(total_loss / max_steps, 4),
           "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()

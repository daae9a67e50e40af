"""Predict final course score from registrar records + LMS engagement.

Two exports are joined on student_id: the registrar roster (one row per
enrolled student, with the final score) and the LMS activity summary (one row
per LMS account). Regression head, MSE, HF-Trainer-style dict logging.
"""
import argparse
import csv
import json
import math
import os
import random
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

ARGS = dict(
    seed=42,
    n_students=4000,
    n_sections=110,
    per_device_train_batch_size=64,
    num_train_epochs=12,
    learning_rate=3e-4,
    weight_decay=0.01,
    warmup_ratio=0.05,
    logging_steps=50,
    eval_frac=0.2,
)


def write_exports(out_dir, n, n_sections, seed):
    rng = np.random.default_rng(seed)
    section = np.sort(rng.integers(0, n_sections, size=n))
    section_diff = rng.normal(0, 6.0, size=n_sections)        # harsh vs lenient instructors
    section_size_cap = rng.integers(25, 60, size=n_sections)
    prior_gpa = np.clip(rng.normal(3.0, 0.5, size=n), 0.0, 4.0)
    work_hours = np.clip(rng.normal(12, 8, size=n), 0, 40)
    age = rng.integers(18, 35, size=n)
    motivation = rng.normal(0, 1, size=n)
    logins = rng.poisson(np.exp(3.0 + 0.4 * motivation))
    submissions = rng.binomial(12, 1 / (1 + np.exp(-(1.0 + 1.2 * motivation))))
    forum = rng.poisson(np.exp(0.5 + 0.6 * motivation))
    video_min = np.maximum(0, rng.normal(300 + 120 * motivation, 60))
    score = (55 + 9 * (prior_gpa - 3.0) / 0.5 + 2.2 * submissions - 13.2 + 3.0 * np.log1p(forum)
             + 0.02 * (video_min - 300) - 0.25 * (work_hours - 12) + section_diff[section]
             + rng.normal(0, 4.0, size=n))
    score = np.clip(score, 0, 100)

    student_id = rng.permutation(np.arange(20_000, 20_000 + n))
    has_lms = rng.random(n) > 0.03          # some students never activated their LMS account

    roster = os.path.join(out_dir, "registrar_roster.csv")
    with open(roster, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "section", "section_cap", "age", "prior_gpa", "work_hours", "final_score"])
        for i in range(n):  # registrar prints class lists section by section
            w.writerow([int(student_id[i]), int(section[i]), int(section_size_cap[section[i]]), int(age[i]),
                        round(float(prior_gpa[i]), 2), round(float(work_hours[i]), 1), round(float(score[i]), 1)])

    lms = os.path.join(out_dir, "lms_activity.csv")
    with open(lms, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "logins", "submissions", "forum_posts", "video_minutes"])
        for i in range(n):
            if has_lms[i]:
                w.writerow([int(student_id[i]), int(logins[i]), int(submissions[i]), int(forum[i]),
                            round(float(video_min[i]), 1)])
        for k in range(40):  # instructor / TA / test accounts
            w.writerow([90_000 + k, int(rng.integers(50, 400)), 0, int(rng.integers(0, 80)), 0.0])
    return roster, lms


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def join_on_student(roster, lms):
    lms_by_id = {r["student_id"]: r for r in lms}
    joined = []
    for r in roster:
        a = lms_by_id.get(r["student_id"])
        if a is None:
            continue
        joined.append({**r, **a})
    return joined


FEATURES = ["section_cap", "age", "prior_gpa", "work_hours", "logins", "submissions", "forum_posts",
            "video_minutes"]


def featurize(rows, n_sections):
    num = np.array([[float(r[c]) for c in FEATURES] for r in rows], dtype=np.float32)
    num[:, 4:] = np.log1p(num[:, 4:])
    sec = np.zeros((len(rows), n_sections), dtype=np.float32)
    for i, r in enumerate(rows):
        sec[i, int(r["section"])] = 1.0
    return num, sec


class StudentDataset(torch.utils.data.Dataset):
    def __init__(self, records):
        self.records = records

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        x, t = self.records[i]
        return {"features": torch.from_numpy(x), "labels": torch.tensor(t, dtype=torch.float32)}


def build_datasets(args, tmp_dir):
    roster_path, lms_path = write_exports(tmp_dir, args["n_students"], args["n_sections"], args["seed"])
    roster, lms = read_csv(roster_path), read_csv(lms_path)
    joined = join_on_student(roster, lms)
    targets = np.array([float(r["final_score"]) for r in joined], dtype=np.float32)
    num, sec = featurize(joined, args["n_sections"])

    rng = np.random.default_rng(args["seed"])
    perm = rng.permutation(len(joined))
    n_eval = int(len(perm) * args["eval_frac"])
    ev, tr = perm[:n_eval], perm[n_eval:]
    mu, sd = num[tr].mean(0), num[tr].std(0) + 1e-6
    X = np.concatenate([(num - mu) / sd, sec], axis=1).astype(np.float32)

    records = [(x, t) for x, t in zip(X, targets)]
    y_mu, y_sd = float(targets.mean()), float(targets.std())
    records = [(x, (t - y_mu) / y_sd) for x, t in records]
    train = StudentDataset([records[i] for i in tr])
    evald = StudentDataset([records[i] for i in ev])
    return train, evald, X.shape[1], y_sd


class ScoreRegressor(nn.Module):
    def __init__(self, d_in, hidden=128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU())
        self.head = nn.Linear(hidden, 1)

    def forward(self, features, labels=None):
        pred = self.head(self.body(features)).squeeze(-1)
        loss = None if labels is None else nn.functional.mse_loss(pred, labels)
        return {"loss": loss, "logits": pred}


def loss_fn(model, batch):
    return model(**batch)["loss"]


def make_optimizer(params, args=ARGS):
    return torch.optim.AdamW(params, lr=args["learning_rate"], weight_decay=args["weight_decay"])


def collate(items):
    return {"features": torch.stack([it["features"] for it in items]),
            "labels": torch.stack([it["labels"] for it in items])}


def make_target():
    args = dict(ARGS)
    torch.manual_seed(args["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train, _, d_in, _ = build_datasets(args, tmp)
    model = ScoreRegressor(d_in)
    bs = args["per_device_train_batch_size"]
    data = [collate([train[j] for j in range(i * bs, (i + 1) * bs)]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters(), args), "task": "regression"}


@torch.no_grad()
def evaluate(model, loader, y_sd):
    model.eval()
    tot, n = 0.0, 0
    for batch in loader:
        out = model(**batch)
        tot += out["loss"].item() * len(batch["labels"])
        n += len(batch["labels"])
    model.train()
    mse = tot / n
    return {"eval_loss": round(mse, 4), "eval_rmse": round(math.sqrt(mse) * y_sd, 3), "eval_r2": round(1 - mse, 4)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num_train_epochs", type=int, default=ARGS["num_train_epochs"])
    p.add_argument("--learning_rate", type=float, default=ARGS["learning_rate"])
    cli = p.parse_args()
    args = dict(ARGS, num_train_epochs=cli.num_train_epochs, learning_rate=cli.learning_rate)

    random.seed(args["seed"])
    np.random.seed(args["seed"])
    torch.manual_seed(args["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train, evald, d_in, y_sd = build_datasets(args, tmp)

    g = torch.Generator().manual_seed(args["seed"])
    train_dl = torch.utils.data.DataLoader(train, batch_size=args["per_device_train_batch_size"], shuffle=True,
                                           collate_fn=collate, generator=g)
    eval_dl = torch.utils.data.DataLoader(evald, batch_size=256, collate_fn=collate)
    model = ScoreRegressor(d_in)
    opt = make_optimizer(model.parameters(), args)
    total = len(train_dl) * args["num_train_epochs"]
    warm = int(total * args["warmup_ratio"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm)))

    print("***** Running training *****")
    print(f"  Num examples = {len(train)}")
    print(f"  Num Epochs = {args['num_train_epochs']}")
    print(f"  Instantaneous batch size per device = {args['per_device_train_batch_size']}")
    print(f"  Total optimization steps = {total}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters()):,}")

    step, t0, running, n_run = 0, time.time(), 0.0, 0
    for epoch in range(args["num_train_epochs"]):
        for batch in train_dl:
            loss = model(**batch)["loss"]
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            running += loss.item()
            n_run += 1
            if step % args["logging_steps"] == 0:
                print({"loss": round(running / n_run, 4), "grad_norm": round(float(gn), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / len(train_dl), 2)})
                running, n_run = 0.0, 0
        metrics = evaluate(model, eval_dl, y_sd)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)

    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(len(train) * args["num_train_epochs"] / rt, 1),
           "train_steps_per_second": round(total / rt, 2), "epoch": float(args["num_train_epochs"])})
    print(json.dumps(evaluate(model, eval_dl, y_sd)))


if __name__ == "__main__":
    main()

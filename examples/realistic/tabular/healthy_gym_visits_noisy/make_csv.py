"""Synthetic gym data: member table + 12-week visit log; label = renewed membership."""
import csv
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent
rng = np.random.default_rng(31337)
N = 1400
WEEKS = 12

ids = rng.choice(np.arange(100000, 999999), size=N, replace=False)
tenure = np.sort(rng.integers(14, 1500, size=N))[::-1]  # oldest members first
age = np.clip(rng.normal(38, 12, size=N), 16, 80).astype(int)
plan = rng.choice(["monthly", "annual", "offpeak"], size=N, p=[0.55, 0.25, 0.2])
habit = rng.normal(size=N)

logit = 0.2 + 2.4 * habit + 0.7 * (plan == "annual") + 0.25 * np.log(tenure / 200)
renewed = rng.random(N) < 1 / (1 + np.exp(-logit))
flip = rng.random(N) < 0.10  # front-desk coding errors, transfers, etc.
renewed = renewed ^ flip

visits = []
for i in range(N):
    rate = 0.45 * np.exp(0.8 * habit[i] + 0.2 * rng.normal())  # visits per week
    for d in rng.integers(0, 7 * WEEKS, size=rng.poisson(rate * WEEKS)):
        kind = rng.choice(["gym", "class", "pool"], p=[0.6, 0.25, 0.15])
        minutes = int(np.clip(rng.normal(55 + 8 * habit[i], 18), 10, 180))
        visits.append((int(d), f"M{ids[i]}", kind, minutes))
visits.sort()

with open(OUT / "visits.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["day", "member_id", "area", "minutes"])
    w.writerows(visits)

with open(OUT / "members.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["member_id", "age", "plan", "tenure_days", "renewed"])
    for i in range(N):
        w.writerow([f"M{ids[i]}", age[i], plan[i], tenure[i], int(renewed[i])])

no_visits = N - len({v[1] for v in visits})
oracle = ((logit > 0) == renewed).mean()
print(f"oracle (noise-free logit) acc on recorded labels: {oracle:.3f}")
print(f"{N} members, {len(visits)} visits, {no_visits} without visits, renewal rate {renewed.mean():.3f}")

"""Synthetic utility data: household accounts + per-meter usage summaries."""
import csv
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent
rng = np.random.default_rng(99)
N = 2000

region = rng.choice(["north", "south", "east", "west"], size=N)
tariff = rng.choice(["fixed", "variable", "prepaid"], size=N, p=[0.45, 0.4, 0.15])
occupants = rng.integers(1, 7, size=N)
income = rng.normal(size=N)  # unobserved

avg_kwh = np.exp(2.0 + 0.15 * occupants + 0.25 * rng.normal(size=N))
peak_share = np.clip(0.35 + 0.04 * rng.normal(size=N) - 0.05 * income, 0.05, 0.9)
zero_days = rng.poisson(np.exp(0.4 - 1.1 * income))
coverage = np.clip(1.0 - rng.exponential(0.06, size=N), 0.3, 1.0)

logit = (-1.6 - 1.6 * income + 0.9 * np.log1p(zero_days) + 1.2 * (tariff == "prepaid") + 0.45 * (avg_kwh > 25)
         + 0.4 * (region == "east") + 0.2 * (occupants - 3))
late = rng.random(N) < 1 / (1 + np.exp(-logit))

with open(OUT / "households.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["household_id", "region", "tariff", "occupants", "late_payment"])
    for i in range(N):
        w.writerow([f"H{i + 1:05d}", region[i], tariff[i], occupants[i], int(late[i])])

with open(OUT / "meters.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["meter_id", "household_id", "coverage", "avg_daily_kwh", "peak_share", "zero_days"])
    for i in range(N):
        w.writerow([f"M{700000 + 3 * i}", f"H{i + 1:05d}", f"{coverage[i]:.3f}",
                    f"{avg_kwh[i]:.2f}", f"{peak_share[i]:.3f}", zero_days[i]])

print(f"{N} households, late rate {late.mean():.3f}, coverage<0.85: {(coverage < 0.85).mean():.3f}")

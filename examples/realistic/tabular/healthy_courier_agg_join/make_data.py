"""Generate deliveries.csv (one row per delivery, last quarter) and couriers.csv (HR table with the attrition label)."""
import csv

import numpy as np

rng = np.random.default_rng(23)
N = 1500
VEHICLES = ["bike", "ebike", "scooter", "car"]

ids = rng.choice(np.arange(1000, 99999), size=N, replace=False)
vehicle = rng.choice(VEHICLES, size=N, p=[0.3, 0.3, 0.25, 0.15])
tenure = rng.integers(1, 60, size=N)
satisfaction = rng.normal(0, 1, N)
hours = rng.gamma(2.5, 1.0, N)

rows = []
late_rate = np.zeros(N)
mean_tip = np.zeros(N)
for i in range(N):
    n = rng.poisson(2.0 * hours[i]) + 1
    dist = rng.gamma(2.0, 1.6, n)
    speed = {"bike": 14, "ebike": 19, "scooter": 24, "car": 22}[vehicle[i]]
    minutes = 8 + 60 * dist / speed + rng.normal(0, 6, n)
    late = (minutes > 35).astype(int)
    tip = np.maximum(0, rng.normal(1.2 + 0.5 * satisfaction[i], 0.7, n))
    rating = np.clip(np.round(4.3 + 0.4 * satisfaction[i] - 0.6 * late + rng.normal(0, 0.5, n)), 1, 5)
    late_rate[i] = late.mean()
    mean_tip[i] = tip.mean()
    day = rng.integers(0, 91, n)
    for d, km, m, t, r in zip(day, dist, minutes, tip, rating):
        rows.append((int(d), f"K{ids[i]}", round(km, 1), int(round(max(m, 5))), round(t, 1), int(r)))
rows.sort()

logit = (0.5 - 1.1 * satisfaction - 0.5 * np.log(hours) + 2.5 * late_rate - 0.02 * tenure
         + 0.4 * (vehicle == "bike") + rng.normal(0, 0.6, N))
left = (rng.random(N) < 1 / (1 + np.exp(-logit))).astype(int)
print("attrition rate", left.mean(), "deliveries", len(rows))

with open("deliveries.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["day", "courier_id", "distance_km", "minutes", "tip_eur", "rating"])
    w.writerows(rows)

order = np.argsort(-tenure, kind="stable")           # HR export: most senior first
with open("couriers.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["courier_id", "vehicle", "tenure_months", "left_within_90d"])
    for i in order:
        w.writerow([f"K{ids[i]}", vehicle[i], tenure[i], left[i]])

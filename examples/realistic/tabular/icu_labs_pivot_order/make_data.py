"""Generate labs.csv (long format: one row per lab/vital result) and admissions.csv (one row per ICU stay)."""
import csv

import numpy as np

rng = np.random.default_rng(5)
N = 850
# name: (mean, sd, effect of severity, probability the test is taken)
TESTS = {
    "lactate": (1.6, 0.6, 0.9, 0.70),
    "wbc": (9.0, 3.0, 2.5, 0.97),
    "creatinine": (1.0, 0.3, 0.35, 0.95),
    "platelets": (240, 60, -45, 0.95),
    "map": (82, 9, -7, 1.0),
    "heart_rate": (86, 12, 10, 1.0),
    "resp_rate": (18, 3, 3, 1.0),
    "spo2": (96, 2, -1.8, 1.0),
}

stay = rng.choice(np.arange(1000, 9999), size=N, replace=False)
severity = rng.normal(0, 1, N)
age = np.clip(rng.normal(64, 14, N), 18, 95).astype(int)
label_logit = -2.2 + 3.2 * severity + 0.02 * (age - 64)
deteriorated = (rng.random(N) < 1 / (1 + np.exp(-label_logit))).astype(int)
print("deterioration rate", deteriorated.mean())

rows = []
for i in range(N):
    t0 = rng.uniform(0, 24 * 60)
    for test, (mu, sd, eff, p_taken) in TESTS.items():
        if rng.random() > p_taken:
            continue
        for _ in range(rng.integers(1, 3)):
            v = mu + eff * severity[i] + sd * rng.normal()
            rows.append((round(t0 + rng.uniform(0, 360)), f"E{stay[i]}", test, round(max(v, 0.1), 2)))
rows.sort()
print("lab rows", len(rows))

with open("labs.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["charttime_min", "stay_id", "test", "value"])
    w.writerows(rows)

with open("admissions.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["stay_id", "age", "deteriorated_48h"])
    for i in range(N):
        w.writerow([f"E{stay[i]}", age[i], deteriorated[i]])

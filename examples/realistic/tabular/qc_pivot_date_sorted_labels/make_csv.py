"""Synthetic LIMS export: long-format lab measurements + QC release decisions."""
import csv
import datetime as dt
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent
rng = np.random.default_rng(414)

N = 800
START = dt.date(2025, 1, 6)
ANALYTES = {  # name: (target, spread, decimals)
    "moisture_pct": (4.2, 0.6, 2),
    "viscosity_cp": (1250.0, 90.0, 1),
    "ph": (6.8, 0.25, 2),
    "impurity_ppm": (35.0, 12.0, 1),
    "density_gml": (1.085, 0.012, 4),
    "particle_um": (48.0, 7.0, 1),
}

seq = rng.choice(np.arange(1, 10000), size=N, replace=False)
line = rng.integers(1, 4, size=N)
ids = [f"L{l}-{s:04d}" for l, s in zip(line, seq)]
prod_day = np.sort(rng.integers(0, 330, size=N))

z = rng.normal(size=(N, len(ANALYTES)))
z[:, 3] = np.abs(z[:, 3]) * np.sign(z[:, 3] + 0.6)  # impurity skewed high
score = (2.4 - 1.1 * z[:, 0] ** 2 - 1.6 * np.clip(z[:, 3], 0, None) ** 1.5
         - 0.9 * np.abs(z[:, 2]) - 0.5 * np.clip(-z[:, 1], 0, None) + 0.4 * z[:, 5])
passed = rng.random(N) < 1 / (1 + np.exp(-2.0 * score))

long_rows = []
for i in range(N):
    for j, (name, (mu, sd, dec)) in enumerate(ANALYTES.items()):
        if rng.random() < 0.03:
            continue  # sample not analysed
        day = START + dt.timedelta(days=int(prod_day[i] + rng.integers(0, 3)))
        long_rows.append((day.isoformat(), ids[i], name, round(mu + sd * z[i, j], dec)))
long_rows.sort(key=lambda r: r[0])

with open(OUT / "lab_measurements.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["measured_on", "batch_id", "analyte", "value"])
    w.writerows(long_rows)

release = [START + dt.timedelta(days=int(d + rng.integers(3, 15))) for d in prod_day]
order = sorted(range(N), key=lambda i: ids[i])  # LIMS exports by batch id
with open(OUT / "qc_results.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["batch_id", "release_date", "passed"])
    for i in order:
        w.writerow([ids[i], release[i].isoformat(), int(passed[i])])

print(f"{N} batches, {len(long_rows)} measurements, pass rate {passed.mean():.3f}")

"""Generate sensors.csv (weekly sensor summary per pump) and maintenance.csv (CMMS export)."""
import csv

import numpy as np

rng = np.random.default_rng(11)
N = 1500
SITES = ["north", "river", "plant2", "east"]

asset_num = rng.choice(np.arange(100, 9999), size=N, replace=False)
site = rng.choice(SITES, size=N)
order = np.lexsort((rng.random(N), site))          # export is grouped by site, not by asset id
asset_num, site = asset_num[order], site[order]

health = rng.normal(0, 1, N)
run_hours = rng.uniform(500, 40000, N)
vib = np.exp(0.25 * rng.normal(0, 1, N) - 0.30 * health) * 2.2
temp = 55 + 6 * rng.normal(0, 1, N) - 4 * health
pressure = rng.normal(6.0, 0.8, N)
flow = rng.normal(120, 15, N) + 5 * health

has_record = rng.random(N) < 0.85
days_since = rng.gamma(2.0, 60, N)
repairs = rng.poisson(np.exp(0.2 - 0.5 * health))
seal = (rng.random(N) < 0.3).astype(int)

logit = (-2.3 + 1.4 * (np.log(vib) - np.log(2.2)) / 0.35 + 0.12 * (temp - 55)
         + 0.008 * (days_since - 120) + 0.55 * repairs - 0.9 * seal + 0.00002 * run_hours)
failed = (rng.random(N) < 1 / (1 + np.exp(-logit))).astype(int)
print("failure rate", failed.mean(), "with record", has_record.mean(), "failure|record", failed[has_record].mean())

with open("sensors.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["asset_id", "site", "run_hours", "vib_rms_mm_s", "bearing_temp_c", "discharge_bar", "flow_m3h", "failed_30d"])
    for i in range(N):
        w.writerow([f"P-{asset_num[i]:04d}", site[i], int(run_hours[i]), round(vib[i], 3), round(temp[i], 1),
                    round(pressure[i], 2), round(flow[i], 1), failed[i]])

rec = np.flatnonzero(has_record)
rec = rec[np.argsort(days_since[rec])]               # CMMS export sorted by last service date
with open("maintenance.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["asset_id", "days_since_service", "repairs_12m", "seal_replaced"])
    for i in rec:
        w.writerow([f"P-{asset_num[i]:04d}", int(days_since[i]), repairs[i], seal[i]])

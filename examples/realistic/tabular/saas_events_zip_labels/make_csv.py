"""Generate customers.csv and events.csv for the churn model (synthetic)."""
import csv
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent
rng = np.random.default_rng(20261120)

N = 1200
WINDOW = 90

ids = rng.choice(np.arange(10000, 99999), size=N, replace=False)
signup_day = np.sort(rng.integers(-720, -5, size=N))  # customers.csv is in signup order
plan = rng.choice(["basic", "pro", "team"], size=N, p=[0.5, 0.35, 0.15])
seats = np.where(plan == "basic", 1,
                 np.where(plan == "pro", rng.integers(1, 6, size=N), rng.integers(5, 41, size=N)))
engagement = rng.normal(size=N)
logit = -0.7 - 2.3 * engagement + 0.6 * (plan == "basic") - 0.3 * (plan == "team")
churned = rng.random(N) < 1.0 / (1.0 + np.exp(-logit))

price = {"basic": 12.0, "pro": 29.0, "team": 19.0}
events = []
for i in range(N):
    cid = f"C{ids[i]:05d}"
    # about a third of the churners have already gone quiet before the window ends
    quiet = churned[i] and rng.random() < 0.35
    active = int(rng.integers(30, WINDOW)) if quiet else WINDOW
    z = engagement[i]
    n_login = rng.poisson(0.045 * np.exp(0.6 * z) * active)
    n_export = rng.poisson(0.012 * np.exp(0.9 * z) * active)
    n_ticket = rng.poisson((0.006 * np.exp(-0.6 * z) + 0.006 * churned[i]) * active)
    for kind, n in (("login", n_login), ("export", n_export), ("ticket", n_ticket)):
        for d in rng.integers(0, active, size=n):
            events.append((int(d), cid, kind, 0.0))
    for d in range(int(rng.integers(0, min(30, active))), active, 30):
        events.append((d, cid, "payment", round(price[plan[i]] * seats[i], 2)))

events.sort(key=lambda e: (e[0], e[1]))
with open(OUT / "events.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["day", "customer_id", "event", "amount"])
    for d, cid, kind, amt in events:
        w.writerow([d, cid, kind, f"{amt:g}"])

with open(OUT / "customers.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["customer_id", "signup_day", "plan", "seats", "churned"])
    for i in range(N):
        w.writerow([f"C{ids[i]:05d}", signup_day[i], plan[i], seats[i], int(churned[i])])

print(f"{N} customers, {len(events)} events, churn rate {churned.mean():.3f}")

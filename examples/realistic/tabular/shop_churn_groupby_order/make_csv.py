"""Generate customers.csv and orders.csv for the repeat-purchase churn model.

customers.csv is exported in signup order (the CRM export order); orders.csv
is the order log in time order.
"""
import csv

import numpy as np

rng = np.random.default_rng(20261)
N = 1200
HORIZON = 365

ids = rng.choice(np.arange(10000, 99999), size=N, replace=False)
signup_day = np.sort(rng.integers(0, 200, size=N))
region = rng.choice(["north", "south", "east", "west"], size=N, p=[0.3, 0.25, 0.25, 0.2])
plan = rng.choice(["basic", "plus", "pro"], size=N, p=[0.55, 0.3, 0.15])
plan_rate = {"basic": 0.016, "plus": 0.022, "pro": 0.03}

# each customer has a latent engagement level that drives order frequency,
# basket size, and how early they stop ordering
engage = rng.normal(0, 1, size=N)
orders = []
churned = np.zeros(N, dtype=int)
for i in range(N):
    rate = plan_rate[plan[i]] * np.exp(0.45 * engage[i])
    # churners stop ordering at some point before the end of the window
    stop_logit = -0.2 - 1.3 * engage[i] + (0.4 if plan[i] == "basic" else -0.3)
    will_churn = rng.random() < 1 / (1 + np.exp(-stop_logit))
    churned[i] = int(will_churn)
    end = HORIZON
    if will_churn:
        end = signup_day[i] + rng.integers(20, max(21, HORIZON - signup_day[i] - 60))
    day = signup_day[i]
    n = 0
    while True:
        day = day + max(1, int(rng.exponential(1 / rate)))
        if day >= end and n > 0:
            break
        if day >= HORIZON:
            day = min(day, HORIZON - 1)
        basket = rng.lognormal(3.2 + 0.25 * engage[i], 0.5)
        items = 1 + rng.poisson(1.0 + 0.5 * max(engage[i], 0))
        returned = int(rng.random() < (0.22 if will_churn else 0.07))
        orders.append((f"C{ids[i]}", int(day), round(float(basket), 2), int(items), returned))
        n += 1
        if day >= HORIZON - 1:
            break

orders.sort(key=lambda r: r[1])
with open("customers.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["customer_id", "signup_day", "region", "plan", "churned"])
    for i in range(N):
        w.writerow([f"C{ids[i]}", int(signup_day[i]), region[i], plan[i], churned[i]])
with open("orders.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["customer_id", "day", "amount", "items", "returned"])
    w.writerows(orders)
print(f"{N} customers, {len(orders)} orders, churn rate {churned.mean():.3f}")

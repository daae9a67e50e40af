"""Generate customers.csv and events.csv for the streaming churn example (90-day activity export)."""
import csv

import numpy as np

rng = np.random.default_rng(7)
N = 1200
PLANS = {"basic": 7.99, "standard": 12.99, "premium": 17.99}

ids = rng.choice(np.arange(10000, 99999), size=N, replace=False)
plan = rng.choice(list(PLANS), size=N, p=[0.45, 0.35, 0.20])
tenure = rng.integers(1, 48, size=N)
engagement = rng.normal(0.0, 1.0, size=N)
frustration = rng.gamma(1.2, 0.6, size=N)

customers, events = [], []
churn_logit = np.zeros(N)
for i in range(N):
    cid = f"C{ids[i]}"
    rate = np.exp(0.6 * engagement[i] + 1.3)
    n_play = rng.poisson(rate) + 1
    last_active = int(np.clip(89 - rng.exponential(6 + 20 * (engagement[i] < -0.5)), 0, 89))
    days = np.sort(rng.integers(max(0, last_active - 60), last_active + 1, size=n_play))
    days[-1] = last_active
    for d in days:
        mins = max(1.0, rng.normal(35 + 12 * engagement[i], 12))
        events.append((d, cid, "play", round(mins, 1)))
    n_skip = rng.poisson(0.8 + 1.5 * frustration[i])
    for d in rng.integers(0, 90, size=n_skip):
        events.append((int(d), cid, "skip", 0.0))
    n_support = rng.poisson(0.4 * frustration[i])
    for d in rng.integers(0, 90, size=n_support):
        events.append((int(d), cid, "support", round(rng.uniform(3, 25), 1)))
    n_fail = rng.binomial(2, 0.06 + 0.05 * (plan[i] == "premium"))
    for d in rng.integers(0, 90, size=n_fail):
        events.append((int(d), cid, "payment_fail", 0.0))
    churn_logit[i] = (-1.2 - 1.5 * engagement[i] + 0.05 * (89 - last_active) + 0.6 * n_support
                      + 1.0 * n_fail + 0.15 * n_skip - 0.02 * tenure[i])
    customers.append([cid, int(tenure[i]), plan[i], PLANS[plan[i]]])

p = 1 / (1 + np.exp(-churn_logit))
churned = (rng.random(N) < p).astype(int)
print("churn rate", churned.mean(), "events", len(events))

with open("customers.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["customer_id", "tenure_months", "plan", "monthly_fee", "churned"])
    for row, c in zip(customers, churned):
        w.writerow(row + [int(c)])

events.sort(key=lambda e: e[0])
with open("events.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["day", "customer_id", "event", "minutes"])
    w.writerows(events)

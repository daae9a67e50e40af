"""Generate hotel booking history (bookings.csv) and the following month (bookings_next.csv)."""
import csv

import numpy as np

rng = np.random.default_rng(4242)
N_AGENTS = 420
SEGMENTS = ["online_ta", "offline_ta", "direct", "corporate"]
DEPOSITS = ["none", "refundable", "non_refund"]

# agents differ a lot in how often their bookings get cancelled; most agents are small
agent_effect = rng.normal(0.0, 1.1, size=N_AGENTS)
agent_weight = 1.0 / np.arange(1, N_AGENTS + 1) ** 0.55
agent_weight /= agent_weight.sum()
agent_ids = np.array([f"A{100 + i}" for i in range(N_AGENTS)])
rng.shuffle(agent_ids)


def draw(n, month0):
    agent = rng.choice(N_AGENTS, size=n, p=agent_weight)
    segment = rng.choice(len(SEGMENTS), size=n, p=[0.5, 0.2, 0.2, 0.1])
    deposit = rng.choice(len(DEPOSITS), size=n, p=[0.8, 0.05, 0.15])
    lead = np.round(rng.gamma(1.6, 45, size=n)).astype(int)
    nights = 1 + rng.poisson(2.2, size=n)
    guests = 1 + rng.binomial(3, 0.35, size=n)
    adr = np.round(rng.lognormal(4.5, 0.3, size=n) * (1 + 0.1 * (guests - 1)), 2)
    requests = rng.poisson(0.7, size=n)
    prev_cancel = rng.binomial(1, 0.08, size=n) * (1 + rng.poisson(0.5, size=n))
    month = month0 + rng.integers(0, 3, size=n)
    logit = (
        -0.9
        + 0.9 * np.log1p(lead / 30.0)
        - 0.55 * requests
        + 0.9 * (deposit == 2) - 0.5 * (deposit == 1)
        + 0.5 * (segment == 0) - 0.6 * (segment == 3)
        + 0.8 * np.minimum(prev_cancel, 2)
        + 0.004 * (adr - 90)
        + agent_effect[agent]
    )
    canceled = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    rows = []
    for i in range(n):
        rows.append([
            f"B{month0}{i:05d}", int(month[i]), agent_ids[agent[i]], SEGMENTS[segment[i]],
            DEPOSITS[deposit[i]], int(lead[i]), int(nights[i]), int(guests[i]), float(adr[i]),
            int(requests[i]), int(prev_cancel[i]), int(canceled[i]),
        ])
    return rows


header = ["booking_id", "arrival_month", "agent", "market_segment", "deposit_type", "lead_time",
          "nights", "guests", "adr", "special_requests", "previous_cancellations", "is_canceled"]
for name, n, month0 in [("bookings.csv", 3000, 1), ("bookings_next.csv", 1000, 4)]:
    rows = draw(n, month0)
    with open(name, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    print(name, n, "cancel rate", np.mean([r[-1] for r in rows]).round(3))

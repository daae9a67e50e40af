"""Regenerate motor_claims.csv: synthetic motor-insurance claims with a 'flagged' review label. Run once."""
import csv
import math
import random

random.seed(7)
N = 2600
FIELDS = ["driver_age", "vehicle_value", "annual_km", "prior_claims", "policy_years",
          "claim_amount", "days_to_report", "night_incident", "flagged"]

rows = []
for _ in range(N):
    age = random.uniform(18, 80)
    value = math.exp(random.gauss(9.8, 0.5))
    km = max(1000.0, random.gauss(14000, 5000))
    prior = min(6, int(random.expovariate(1.2)))
    years = random.uniform(0, 25)
    amount = value * random.uniform(0.05, 1.1)
    days = random.expovariate(1 / 9.0)
    night = 1 if random.random() < 0.25 else 0
    z = (-0.6 + 0.9 * prior - 0.08 * years + 2.2 * (amount / value - 0.55)
         + 0.09 * (days - 9) + 1.1 * night - 0.03 * (age - 45) + 0.9 * (age < 25) * night)
    p = 1 / (1 + math.exp(-2.0 * z))
    flagged = 1 if random.random() < p else 0
    rows.append([round(age, 1), round(value, 0), round(km, 0), prior, round(years, 2),
                 round(amount, 0), round(days, 2), night, flagged])

with open("motor_claims.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(FIELDS)
    w.writerows(rows)
print(f"wrote {N} rows, positive rate {sum(r[-1] for r in rows) / N:.3f}")

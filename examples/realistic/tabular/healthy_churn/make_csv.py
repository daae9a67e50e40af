"""Regenerate customers.csv (synthetic churn export). Run once; train.py only reads the CSV."""
import csv
import math
import os
import random

N = 3000
CONTRACTS = ["month-to-month", "one-year", "two-year"]
PAYMENTS = ["electronic-check", "mailed-check", "bank-transfer", "credit-card"]
REGIONS = ["north", "south", "east", "west", "central"]
REASONS = ["price", "service", "competitor", "moved", "other"]


def main(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "customers.csv"), seed=7):
    rnd = random.Random(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["customer_id", "age", "tenure_months", "monthly_charges", "annual_income",
                    "support_calls", "contract", "payment_method", "region", "has_partner",
                    "cancellation_reason", "churned"])
        for i in range(N):
            age = min(85, max(18, int(rnd.gauss(44, 14))))
            contract = rnd.choices(CONTRACTS, weights=[0.5, 0.28, 0.22])[0]
            tenure = min(72, max(1, int(rnd.expovariate(1 / (12 if contract == "month-to-month" else 30)))))
            monthly = round(min(120.0, max(18.0, rnd.gauss(68, 22))), 2)
            income = int(min(400000, max(12000, rnd.lognormvariate(math.log(62000), 0.45))))
            calls = min(9, int(rnd.expovariate(1 / 1.4)))
            payment = rnd.choice(PAYMENTS)
            region = rnd.choice(REGIONS)
            partner = rnd.random() < 0.48
            z = (-1.3 + 1.5 * (contract == "month-to-month") - 0.9 * (contract == "two-year")
                 - 0.045 * tenure + 0.022 * (monthly - 68) + 0.38 * calls
                 + 0.45 * (payment == "electronic-check") - 0.35 * partner
                 - 0.25 * (income - 62000) / 30000 + 0.15 * (region == "south"))
            churned = int(rnd.random() < 1 / (1 + math.exp(-z)))
            reason = rnd.choice(REASONS) if churned else ""
            w.writerow([f"C{100000 + i}", age, tenure, f"{monthly:.2f}", income, calls, contract,
                        payment, region, "yes" if partner else "no", reason, churned])


if __name__ == "__main__":
    main()

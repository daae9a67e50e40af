"""Regenerate loans.csv (synthetic loan book with default outcome). Run once; train.py only reads the CSV."""
import csv
import math
import os
import random

N = 3200
HOME = ["rent", "own", "mortgage"]
PURPOSE = ["debt_consolidation", "credit_card", "home_improvement", "small_business", "car", "other"]


def main(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "loans.csv"), seed=11):
    rnd = random.Random(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["loan_id", "age", "employment_years", "loan_amount", "term_months",
                    "interest_rate", "debt_to_income", "credit_score", "open_accounts",
                    "home_ownership", "purpose", "defaulted"])
        for i in range(N):
            age = min(75, max(21, int(rnd.gauss(41, 11))))
            emp = min(age - 18, max(0, int(rnd.expovariate(1 / 6))))
            score = int(min(850, max(480, rnd.gauss(690, 60))))
            amount = int(round(min(40000, max(1000, rnd.lognormvariate(math.log(12000), 0.6))), -2))
            term = rnd.choice([36, 60])
            rate = round(max(5.0, 32 - 0.033 * score + rnd.gauss(0, 2.0) + 1.5 * (term == 60)), 2)
            dti = round(min(45.0, max(0.0, rnd.gauss(18, 8))), 1)
            accounts = max(1, int(rnd.gauss(9, 4)))
            home = rnd.choices(HOME, weights=[0.42, 0.12, 0.46])[0]
            purpose = rnd.choices(PURPOSE, weights=[0.45, 0.2, 0.1, 0.06, 0.07, 0.12])[0]
            z = (-1.6 - 0.018 * (score - 690) + 0.12 * (rate - 12) + 0.06 * (dti - 18)
                 + 0.35 * (term == 60) - 0.05 * emp + 0.25 * (home == "rent")
                 + 0.7 * (purpose == "small_business") + 0.25 * (amount - 12000) / 8000)
            defaulted = int(rnd.random() < 1 / (1 + math.exp(-z)))
            w.writerow([f"L{500000 + i}", age, emp, amount, term, f"{rate:.2f}", f"{dti:.1f}",
                        score, accounts, home, purpose, defaulted])


if __name__ == "__main__":
    main()

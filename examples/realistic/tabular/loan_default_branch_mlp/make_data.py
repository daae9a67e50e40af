"""Generate a synthetic extract of the loan servicing warehouse.

The servicing system keeps charged-off loans and performing loans in separate
tables, so the export comes out as two CSVs plus the branch dimension table.
"""
import numpy as np
import pandas as pd

SEED = 7


def main():
    rng = np.random.default_rng(SEED)
    n_branches = 60
    regions = ["north", "south", "east", "west", "central"]
    branches = pd.DataFrame({
        "branch_id": np.arange(100, 100 + n_branches),
        "region": rng.choice(regions, n_branches),
        "branch_size": rng.choice(["small", "medium", "large"], n_branches, p=[0.5, 0.35, 0.15]),
        "local_unemployment": np.round(rng.uniform(2.5, 9.5, n_branches), 2),
    })

    n = 24000
    purposes = ["debt_consolidation", "home_improvement", "car", "medical", "small_business", "education", "other"]
    purpose_risk = dict(zip(purposes, [0.0, -0.4, -0.2, 0.5, 0.9, 0.3, 0.2]))
    branch_id = rng.choice(branches.branch_id.values, n)
    purpose = rng.choice(purposes, n, p=[0.38, 0.14, 0.12, 0.08, 0.08, 0.06, 0.14])
    annual_income = np.round(np.exp(rng.normal(10.9, 0.45, n)), -2)
    loan_amount = np.round(np.clip(annual_income * rng.uniform(0.05, 0.6, n), 1000, 60000), -2)
    term_months = rng.choice([36, 60], n, p=[0.7, 0.3])
    credit_score = np.clip(rng.normal(690, 55, n), 500, 850).round()
    employment_years = np.clip(rng.exponential(5.0, n), 0, 40).round(1)
    open_accounts = rng.poisson(8, n)
    delinq_2y = rng.poisson(0.35, n)

    b = branches.set_index("branch_id").loc[branch_id]
    region_risk = b.region.map({"north": -0.2, "south": 0.35, "east": 0.0, "west": -0.1, "central": 0.15}).values
    dti = loan_amount / annual_income
    logit = (
        -2.4
        - 0.022 * (credit_score - 690)
        + 3.2 * (dti - 0.3)
        + 0.55 * (term_months == 60)
        + 0.45 * delinq_2y
        - 0.05 * employment_years
        + 0.18 * (b.local_unemployment.values - 6)
        + region_risk
        + np.vectorize(purpose_risk.get)(purpose)
        + rng.normal(0, 0.3, n)
    )
    defaulted = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(int)

    loans = pd.DataFrame({
        "loan_id": np.arange(500000, 500000 + n),
        "branch_id": branch_id,
        "purpose": purpose,
        "annual_income": annual_income,
        "loan_amount": loan_amount,
        "term_months": term_months,
        "credit_score": credit_score,
        "employment_years": employment_years,
        "open_accounts": open_accounts,
        "delinq_2y": delinq_2y,
        "defaulted": defaulted,
    })
    # each source table is ordered by loan_id, as the warehouse exports it
    loans[loans.defaulted == 1].to_csv("loans_charged_off.csv", index=False)
    loans[loans.defaulted == 0].to_csv("loans_performing.csv", index=False)
    branches.to_csv("branches.csv", index=False)
    print(f"wrote {n} loans ({defaulted.mean():.1%} charged off), {n_branches} branches")


if __name__ == "__main__":
    main()

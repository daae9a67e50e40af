"""Synthetic export of the subscription warehouse: customers + monthly usage."""
import numpy as np
import pandas as pd

PLANS = ["basic", "standard", "premium", "family", "student", "business"]
REGIONS = ["north", "south", "east", "west", "central", "coastal", "mountain", "metro"]
PAYMENT = ["credit_card", "debit_card", "bank_transfer", "paypal", "voucher"]
CHANNELS = ["organic", "referral", "paid_search", "social", "partner"]


def generate(n_customers=16000, seed=7, out_dir="."):
    rng = np.random.default_rng(seed)
    plan = rng.choice(PLANS, n_customers, p=[0.25, 0.25, 0.15, 0.15, 0.1, 0.1])
    region = rng.choice(REGIONS, n_customers)
    payment = rng.choice(PAYMENT, n_customers, p=[0.35, 0.2, 0.2, 0.15, 0.1])
    channel = rng.choice(CHANNELS, n_customers)
    tenure = rng.gamma(2.0, 10.0, n_customers).round().clip(1, 96)
    age = rng.normal(38, 12, n_customers).round().clip(18, 85)
    base_price = {"basic": 9.99, "standard": 15.99, "premium": 22.99,
                  "family": 27.99, "student": 5.99, "business": 39.99}
    monthly_charges = np.array([base_price[p] for p in plan]) * rng.uniform(0.9, 1.3, n_customers)

    customers = pd.DataFrame({
        "customer_id": np.arange(100000, 100000 + n_customers),
        "plan": plan, "region": region, "payment_method": payment,
        "signup_channel": channel, "tenure_months": tenure, "age": age,
        "monthly_charges": monthly_charges.round(2),
    })

    # monthly usage rows: 1-6 months of history per customer
    n_months = rng.integers(1, 7, n_customers)
    cid = np.repeat(customers["customer_id"].values, n_months)
    month = np.concatenate([np.arange(k) for k in n_months])
    engagement = rng.normal(0, 1, n_customers)
    eng_rep = np.repeat(engagement, n_months)
    minutes = np.exp(5.0 + 0.6 * eng_rep + rng.normal(0, 0.4, len(cid))).round(1)
    tickets = rng.poisson(np.exp(-0.5 - 0.5 * eng_rep))
    usage = pd.DataFrame({"customer_id": cid, "month_idx": month,
                          "minutes_streamed": minutes, "support_tickets": tickets})

    # churn process: categorical effects dominate
    plan_eff = {"basic": 0.6, "standard": -0.4, "premium": -1.3, "family": -1.8,
                "student": 1.6, "business": -0.8}
    pay_eff = {"credit_card": -0.6, "debit_card": 0.0, "bank_transfer": -1.0,
               "paypal": 0.5, "voucher": 1.9}
    reg_eff = dict(zip(REGIONS, rng.normal(0, 0.7, len(REGIONS))))
    ch_eff = {"organic": -0.3, "referral": -0.8, "paid_search": 0.4, "social": 0.9, "partner": 0.0}
    logit = (np.array([plan_eff[p] for p in plan])
             + np.array([pay_eff[p] for p in payment])
             + np.array([reg_eff[r] for r in region])
             + np.array([ch_eff[c] for c in channel])
             - 0.035 * (tenure - 20)
             - 0.9 * engagement
             + 0.02 * (monthly_charges - 18))
    churned = (rng.uniform(size=n_customers) < 1 / (1 + np.exp(-logit))).astype(int)
    labels = pd.DataFrame({"customer_id": customers["customer_id"], "churned": churned})

    customers.to_csv(f"{out_dir}/customers.csv", index=False)
    usage.to_csv(f"{out_dir}/usage_monthly.csv", index=False)
    labels.to_csv(f"{out_dir}/churn_labels.csv", index=False)


if __name__ == "__main__":
    generate()

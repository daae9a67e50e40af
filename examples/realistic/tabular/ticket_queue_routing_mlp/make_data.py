"""Synthetic helpdesk export: one row per ticket plus the CRM customer table."""
import numpy as np
import pandas as pd

SEED = 11
QUEUES = ["billing", "escalation", "general", "technical"]


def main():
    rng = np.random.default_rng(SEED)
    n_cust = 3000
    customers = pd.DataFrame({
        "customer_id": [f"C{i:05d}" for i in range(n_cust)],
        "tier": rng.choice(["free", "pro", "business", "enterprise"], n_cust, p=[0.45, 0.3, 0.18, 0.07]),
        "region": rng.choice(["NAMER", "EMEA", "APAC", "LATAM"], n_cust, p=[0.45, 0.3, 0.15, 0.1]),
        "account_age_days": rng.integers(5, 2500, n_cust),
        "seats": np.maximum(1, rng.lognormal(1.5, 1.1, n_cust).round()).astype(int),
    })

    n = 20000
    cust_idx = rng.integers(0, n_cust, n)
    c = customers.iloc[cust_idx].reset_index(drop=True)
    product = rng.choice(["web_app", "mobile_app", "api", "payments", "integrations"], n, p=[0.35, 0.2, 0.15, 0.15, 0.15])
    channel = rng.choice(["email", "chat", "phone", "web_form"], n, p=[0.4, 0.3, 0.1, 0.2])
    message_length = np.round(rng.lognormal(5.0, 0.7, n)).astype(int)
    num_attachments = rng.poisson(0.4, n)
    sentiment = np.clip(rng.normal(0.1, 0.45, n), -1, 1).round(3)
    prior_tickets_90d = rng.poisson(1.2, n)
    kw_invoice = rng.uniform(size=n)
    kw_error = rng.uniform(size=n)

    tier_rank = c.tier.map({"free": 0, "pro": 1, "business": 2, "enterprise": 3}).values
    logits = np.zeros((n, 4))
    # billing
    logits[:, 0] = -1.4 + 2.2 * (product == "payments") + 2.0 * (kw_invoice > 0.8) + 0.3 * (channel == "email")
    # escalation
    logits[:, 1] = (-1.9 - 2.2 * sentiment + 0.55 * tier_rank + 0.35 * prior_tickets_90d
                    + 0.6 * (channel == "phone") + 0.3 * np.log(message_length / 150))
    # general
    logits[:, 2] = 0.7 - 0.4 * (num_attachments > 0) + 0.3 * (channel == "chat")
    # technical
    logits[:, 3] = (-1.3 + 1.5 * (kw_error > 0.7) + 0.7 * num_attachments + 1.0 * np.isin(product, ["api", "integrations"])
                    + 0.4 * (product == "mobile_app"))
    logits *= 1.6
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    queue_idx = np.array([rng.choice(4, p=pi) for pi in p])

    tickets = pd.DataFrame({
        "ticket_id": np.arange(900000, 900000 + n),
        "customer_id": c.customer_id,
        "product": product,
        "channel": channel,
        "message_length": message_length,
        "num_attachments": num_attachments,
        "sentiment": sentiment,
        "prior_tickets_90d": prior_tickets_90d,
        "invoice_term_score": kw_invoice.round(3),
        "error_term_score": kw_error.round(3),
        "queue": np.array(QUEUES)[queue_idx],
    })
    tickets.to_csv("tickets.csv", index=False)
    customers.to_csv("customers.csv", index=False)
    print(tickets.queue.value_counts(normalize=True).round(3).to_dict())


if __name__ == "__main__":
    main()

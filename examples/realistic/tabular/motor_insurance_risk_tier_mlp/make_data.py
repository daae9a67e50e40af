"""Synthetic motor-insurance book: policyholders, vehicles, prior claims, underwriting tier."""
import numpy as np
import pandas as pd

VEHICLE_CLASS = ["hatchback", "sedan", "suv", "pickup", "sports", "van", "ev"]
USAGE = ["commute", "pleasure", "business", "rideshare"]
AREA = ["urban", "suburban", "rural", "city_centre"]
OCCUPATION = ["office", "trades", "driver", "student", "retired", "healthcare", "unemployed"]
N_TIERS = 6


def generate(n_policies=18000, seed=3, out_dir="."):
    rng = np.random.default_rng(seed)
    pid = np.arange(500000, 500000 + n_policies)
    age = rng.normal(44, 14, n_policies).clip(17, 90).round()
    licence_years = np.clip(age - 17 - rng.exponential(4, n_policies), 0, None).round()
    occupation = rng.choice(OCCUPATION, n_policies)
    area = rng.choice(AREA, n_policies, p=[0.35, 0.35, 0.2, 0.1])
    annual_km = np.exp(rng.normal(9.4, 0.5, n_policies)).round(-2)
    policies = pd.DataFrame({"policy_id": pid, "driver_age": age, "licence_years": licence_years,
                             "occupation": occupation, "area": area, "annual_km": annual_km})

    vclass = rng.choice(VEHICLE_CLASS, n_policies, p=[0.2, 0.25, 0.2, 0.1, 0.05, 0.1, 0.1])
    usage = rng.choice(USAGE, n_policies, p=[0.5, 0.3, 0.12, 0.08])
    vehicle_age = rng.integers(0, 20, n_policies)
    engine_kw = np.exp(rng.normal(4.5, 0.35, n_policies)).round()
    value = np.exp(rng.normal(9.8, 0.5, n_policies) - 0.05 * vehicle_age).round(-2)
    vehicles = pd.DataFrame({"policy_id": pid, "vehicle_class": vclass, "usage": usage,
                             "vehicle_age": vehicle_age, "engine_kw": engine_kw, "vehicle_value": value})

    # prior claims, 0..5 rows per policy
    frailty = rng.normal(0, 1, n_policies)
    n_claims = rng.poisson(np.exp(-0.7 + 0.6 * frailty)).clip(0, 5)
    cid = np.repeat(pid, n_claims)
    claims = pd.DataFrame({"policy_id": cid,
                           "claim_amount": np.exp(rng.normal(7.5, 1.0, len(cid))).round(2),
                           "at_fault": rng.integers(0, 2, len(cid)),
                           "years_ago": rng.integers(0, 6, len(cid))})

    at_fault_recent = pd.Series(0, index=pid, dtype=float)
    if len(claims):
        af = claims[(claims.at_fault == 1) & (claims.years_ago <= 3)].groupby("policy_id").size()
        at_fault_recent.loc[af.index] = af.values

    vc_eff = dict(zip(VEHICLE_CLASS, [-0.3, -0.5, 0.2, 0.4, 1.8, 0.3, -0.2]))
    use_eff = dict(zip(USAGE, [0.0, -0.6, 0.5, 1.4]))
    area_eff = dict(zip(AREA, [0.4, -0.3, -0.6, 1.0]))
    occ_eff = dict(zip(OCCUPATION, [-0.3, 0.2, 0.6, 0.9, -0.4, -0.5, 0.7]))
    young = np.clip(25 - age, 0, None) / 4.0
    score = (np.array([vc_eff[v] for v in vclass])
             + np.array([use_eff[u] for u in usage])
             + np.array([area_eff[a] for a in area])
             + np.array([occ_eff[o] for o in occupation])
             + young ** 1.5
             - 0.04 * np.minimum(licence_years, 20)
             + 0.9 * (np.log(annual_km) - 9.4)
             + 0.8 * np.log(engine_kw / 90) * (age < 30)
             + 0.9 * at_fault_recent.values
             + 0.3 * frailty
             + rng.normal(0, 0.25, n_policies))
    cuts = np.quantile(score, np.linspace(0, 1, N_TIERS + 1)[1:-1])
    tier = np.digitize(score, cuts)
    labels = pd.DataFrame({"policy_id": pid, "risk_tier": tier})

    policies.to_csv(f"{out_dir}/policyholders.csv", index=False)
    vehicles.to_csv(f"{out_dir}/vehicles.csv", index=False)
    claims.to_csv(f"{out_dir}/prior_claims.csv", index=False)
    labels.to_csv(f"{out_dir}/underwriting_tiers.csv", index=False)


if __name__ == "__main__":
    generate()

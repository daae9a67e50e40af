"""Generate a synthetic 30-day hospital readmission extract (deterministic).

Columns mimic a flattened EHR export: demographics, utilisation counts and a
lab panel. Roughly 15% of rows have an incomplete lab panel (empty hba1c /
creatinine), like patients whose labs were drawn at an outside facility.
"""
import csv
import math
import os

import numpy as np

COLUMNS = ["patient_id", "age", "bmi", "n_prior_admits", "los_days", "n_meds",
           "hba1c", "creatinine", "systolic_bp", "ed_visits_6m", "lives_alone",
           "readmitted_30d"]


def generate(path, n=3200, seed=1234):
    rng = np.random.default_rng(seed)
    age = rng.normal(64, 14, n).clip(18, 98)
    bmi = rng.normal(29, 6, n).clip(15, 60)
    prior = rng.poisson(1.2, n)
    los = rng.gamma(2.0, 2.5, n)
    meds = rng.poisson(7, n)
    hba1c = rng.normal(6.8, 1.4, n).clip(4, 14)
    creat = rng.lognormal(0.05, 0.35, n)
    sbp = rng.normal(132, 18, n)
    ed = rng.poisson(0.8, n)
    alone = rng.random(n) < 0.3
    z = (-2.0 + 0.035 * (age - 64) + 0.75 * prior + 0.16 * (los - 5)
         + 0.09 * (meds - 7) + 0.35 * (hba1c - 6.8) + 1.6 * (creat - 1.1)
         + 0.55 * ed + 0.6 * alone)
    p = 1.0 / (1.0 + np.exp(-z))
    y = (rng.random(n) < p).astype(int)
    missing = rng.random(n) < 0.15
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for i in range(n):
            lab1 = "" if missing[i] else f"{hba1c[i]:.1f}"
            lab2 = "" if missing[i] else f"{creat[i]:.2f}"
            w.writerow([f"P{100000 + i}", f"{age[i]:.0f}", f"{bmi[i]:.1f}", prior[i],
                        f"{los[i]:.1f}", meds[i], lab1, lab2, f"{sbp[i]:.0f}", ed[i],
                        int(alone[i]), y[i]])


def ensure(path):
    if not os.path.exists(path):
        generate(path)
    return path


if __name__ == "__main__":
    generate(os.path.join(os.path.dirname(os.path.abspath(__file__)), "readmissions.csv"))

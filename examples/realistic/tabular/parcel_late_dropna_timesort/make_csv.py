"""Generate shipments.csv: parcel shipments with a late-delivery flag.

Rows come from three hub exports concatenated (so not in time order), and some
fields are blank where the hub scanner or the weather feed had gaps.
"""
import csv
import datetime as dt

import numpy as np

rng = np.random.default_rng(11)
N = 2700
start = dt.datetime(2025, 1, 6)
span_s = 200 * 24 * 3600

rows = []
for hub in ("AMS", "RTM", "EIN"):
    n = N // 3
    t = np.sort(rng.uniform(0, span_s, n))
    for k in range(n):
        ts = start + dt.timedelta(seconds=float(t[k]))
        frac = t[k] / span_s
        dist = rng.lognormal(4.2, 0.6)
        weight = rng.lognormal(1.0, 0.8)
        stops = int(rng.poisson(3)) + 1
        load = float(np.clip(rng.normal(0.6 + 0.15 * frac, 0.15), 0.05, 1.2))  # network gets busier
        weather = int(rng.choice([0, 1, 2, 3], p=[0.55, 0.25, 0.15, 0.05]))
        hub_delay = max(0.0, rng.normal(20 + 40 * max(0, load - 0.7), 12))
        weekend = int(ts.weekday() >= 5)
        logit = (-4.6 + 1.5 * np.log(dist / 60) + 0.4 * stops + 5.0 * (load - 0.6)
                 + 1.0 * weather + 0.05 * (hub_delay - 20) + 0.8 * weekend
                 + 0.8 * (ts.hour >= 16) + (0.5 if hub == "EIN" else 0.0))
        late = int(rng.random() < 1 / (1 + np.exp(-logit)))
        vals = [f"{dist:.1f}", f"{weight:.2f}", str(stops), f"{load:.3f}", str(weather),
                f"{hub_delay:.1f}", str(weekend)]
        # scanner / feed gaps
        if rng.random() < 0.07:
            vals[5] = ""
        if rng.random() < 0.05:
            vals[4] = ""
        if rng.random() < 0.03:
            vals[3] = ""
        rows.append([f"{hub}{k:05d}", ts.strftime("%Y-%m-%d %H:%M:%S"), hub] + vals + [str(late)])

with open("shipments.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["shipment_id", "created_at", "hub", "distance_km", "weight_kg", "n_stops",
                "network_load", "weather_severity", "hub_delay_min", "is_weekend", "late"])
    w.writerows(rows)
print("wrote", len(rows), "rows")

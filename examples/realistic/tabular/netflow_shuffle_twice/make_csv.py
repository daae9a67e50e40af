"""Generate netflow_windows.csv: per-host 1-minute flow aggregates with an attack label.

The export comes out grouped by label (one capture per scenario), like most lab
intrusion datasets.
"""
import csv

import numpy as np

rng = np.random.default_rng(7)
LABELS = ["benign", "port_scan", "dos", "exfiltration"]
COUNTS = [1100, 450, 450, 400]
COLS = ["flows", "mean_duration_s", "bytes_out_kb", "bytes_in_kb", "pkts_per_flow",
        "distinct_dst_ports", "distinct_dst_hosts", "syn_ratio", "rst_ratio", "night_hour"]


def sample(label, n):
    flows = rng.lognormal(3.0, 0.6, n)
    dur = rng.lognormal(0.5, 0.7, n)
    out_kb = rng.lognormal(4.0, 0.9, n)
    in_kb = out_kb * rng.lognormal(1.5, 0.5, n)
    ppf = rng.lognormal(2.5, 0.5, n)
    ports = rng.poisson(4, n) + 1.0
    hosts = rng.poisson(6, n) + 1.0
    syn = rng.beta(2, 18, n)
    rst = rng.beta(1.5, 25, n)
    night = (rng.random(n) < 0.25).astype(float)
    if label == "port_scan":
        ports = ports + rng.poisson(25, n)
        syn = rng.beta(6, 10, n)
        rst = rng.beta(4, 12, n)
        ppf = ppf * 0.4
    elif label == "dos":
        flows = flows * rng.lognormal(1.2, 0.5, n)
        syn = rng.beta(5, 10, n)
        dur = dur * 0.4
        hosts = np.maximum(1.0, hosts - rng.poisson(4, n))
    elif label == "exfiltration":
        out_kb = out_kb * rng.lognormal(1.4, 0.6, n)
        in_kb = in_kb * 0.5
        night = (rng.random(n) < 0.6).astype(float)
        dur = dur * 1.8
    return np.column_stack([flows, dur, out_kb, in_kb, ppf, ports, hosts, syn, rst, night])


with open("netflow_windows.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(COLS + ["label"])
    for label, n in zip(LABELS, COUNTS):
        for row in sample(label, n):
            w.writerow([f"{v:.4g}" for v in row] + [label])
print("wrote", sum(COUNTS), "rows")

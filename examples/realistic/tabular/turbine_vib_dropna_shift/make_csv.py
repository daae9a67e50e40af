"""Writes turbine_log.csv: 10-minute SCADA summaries from a small wind farm with a
maintenance label (normal / bearing_wear / blade_imbalance). Run once; the CSV is committed."""
import csv

import numpy as np

N = 4000
SWAP_ROW = 1450  # vib_y sensor replaced here; the new unit drops readings now and then
CLASSES = ["normal", "bearing_wear", "blade_imbalance"]


def main():
    rng = np.random.default_rng(7)
    status = rng.choice(3, size=N, p=[0.45, 0.30, 0.25])
    wind = rng.gamma(4.0, 2.0, size=N)
    rpm = 9.0 + 1.6 * np.clip(wind, 0, 12) + rng.normal(0, 0.8, N)
    power = np.clip(45.0 * (np.clip(wind, 3, 13) - 3) ** 1.6, 0, 2000) + rng.normal(0, 40, N)
    ambient = 12 + 8 * np.sin(np.arange(N) / 144 * 2 * np.pi / 30) + rng.normal(0, 2, N)

    base_vib = 0.15 + 0.012 * rpm
    vib_x = base_vib + rng.normal(0, 0.05, N)
    vib_y = base_vib + rng.normal(0, 0.05, N)
    bearing_temp = ambient + 18 + 0.01 * power + rng.normal(0, 2.5, N)
    oil_p = 2.4 + rng.normal(0, 0.15, N)

    wear = status == 1
    bearing_temp[wear] += rng.normal(7.0, 2.5, wear.sum())
    vib_x[wear] += rng.normal(0.09, 0.04, wear.sum())
    oil_p[wear] -= rng.normal(0.15, 0.08, wear.sum())

    imb = status == 2
    # imbalance shows up as an asymmetric 1P vibration that grows with rotor speed
    vib_y[imb] += 0.011 * rpm[imb] + rng.normal(0.0, 0.04, imb.sum())

    drop = np.zeros(N, dtype=bool)
    drop[SWAP_ROW:] = rng.random(N - SWAP_ROW) < 0.06

    with open("turbine_log.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rotor_rpm", "power_kw", "ambient_c", "vib_x", "vib_y",
                    "bearing_temp_c", "oil_bar", "status"])
        for i in range(N):
            w.writerow([f"{rpm[i]:.2f}", f"{power[i]:.1f}", f"{ambient[i]:.2f}",
                        f"{vib_x[i]:.4f}", "" if drop[i] else f"{vib_y[i]:.4f}",
                        f"{bearing_temp[i]:.2f}", f"{oil_p[i]:.3f}", CLASSES[status[i]]])


if __name__ == "__main__":
    main()

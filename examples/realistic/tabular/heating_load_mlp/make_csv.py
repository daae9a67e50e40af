"""Regenerate heating_load.csv: synthetic daily heating energy of small buildings. Run once."""
import csv
import math
import random

random.seed(2024)
N = 2800
FIELDS = ["floor_area_m2", "u_value", "window_ratio", "building_age", "occupants",
          "setpoint_c", "outdoor_c", "wind_ms", "heating_kwh"]

with open("heating_load.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(FIELDS)
    for _ in range(N):
        area = random.uniform(60, 400)
        u = random.uniform(0.15, 1.6)
        win = random.uniform(0.1, 0.45)
        age = random.uniform(0, 90)
        occ = random.randint(1, 12)
        setp = random.uniform(18, 23)
        out = random.gauss(5, 6)
        wind = abs(random.gauss(4, 2.5))
        dT = max(0.0, setp - out)
        loss_coef = area * (u * (1 + 1.8 * win)) * (1 + 0.004 * age) * (1 + 0.03 * wind)
        kwh = 0.024 * loss_coef * dT - 0.9 * occ + 6.0
        kwh = max(0.0, kwh * math.exp(random.gauss(0, 0.06)) + random.gauss(0, 3.0))
        w.writerow([round(area, 1), round(u, 3), round(win, 3), round(age, 1), occ,
                    round(setp, 2), round(out, 2), round(wind, 2), round(kwh, 2)])
print("wrote", N, "rows")

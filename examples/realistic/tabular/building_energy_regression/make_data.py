"""Synthetic smart-meter extract: daily electricity use per building + building registry."""
import numpy as np
import pandas as pd

SEED = 3


def main():
    rng = np.random.default_rng(SEED)
    n_b = 220
    use_types = ["office", "retail", "school", "warehouse", "hospital", "residential"]
    base_intensity = dict(zip(use_types, [0.55, 0.75, 0.45, 0.25, 1.6, 0.35]))  # kWh per m2 per day
    buildings = pd.DataFrame({
        "building_id": [f"B{i:04d}" for i in range(n_b)],
        "use_type": rng.choice(use_types, n_b, p=[0.3, 0.15, 0.12, 0.13, 0.05, 0.25]),
        "climate_zone": rng.choice(["2A", "3B", "4A", "5A", "6A"], n_b),
        "floor_area_m2": np.round(np.exp(rng.normal(8.3, 0.8, n_b))),
        "year_built": rng.integers(1955, 2021, n_b),
        "has_chiller": rng.uniform(size=n_b) < 0.4,
    })
    zone_temp = {"2A": 24.0, "3B": 19.0, "4A": 14.0, "5A": 10.0, "6A": 6.0}

    days = pd.date_range("2023-01-02", periods=110, freq="D")
    rows = []
    for _, b in buildings.iterrows():
        t_mean = zone_temp[b.climate_zone]
        doy = days.day_of_year.values
        temp = t_mean + 9 * np.sin(2 * np.pi * (doy - 110) / 365) + rng.normal(0, 3.5, len(days))
        humidity = np.clip(rng.normal(60, 15, len(days)), 15, 100)
        weekend = days.day_of_week.values >= 5
        occ = np.clip(rng.normal(0.8, 0.1, len(days)) - 0.55 * weekend * (b.use_type in ("office", "school")), 0.02, 1.0)
        hdd = np.maximum(0, 18 - temp)
        cdd = np.maximum(0, temp - 22)
        age_factor = 1 + 0.006 * (2020 - b.year_built)
        kwh = (b.floor_area_m2 * base_intensity[b.use_type] * age_factor
               * (0.45 + 0.6 * occ + 0.025 * hdd + (0.05 if b.has_chiller else 0.02) * cdd)
               * np.exp(rng.normal(0, 0.08, len(days))))
        rows.append(pd.DataFrame({
            "building_id": b.building_id,
            "date": days.strftime("%Y-%m-%d"),
            "outdoor_temp_c": temp.round(1),
            "rel_humidity": humidity.round(1),
            "occupancy_rate": occ.round(3),
            "kwh": kwh.round(1),
        }))
    pd.concat(rows).to_csv("meter_daily.csv", index=False)
    buildings.to_csv("buildings.csv", index=False)
    print(f"{n_b} buildings x {len(days)} days")


if __name__ == "__main__":
    main()

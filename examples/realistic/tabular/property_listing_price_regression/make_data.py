"""Synthetic property listings export (listings + neighbourhood reference table)."""
import numpy as np
import pandas as pd

PROPERTY_TYPES = ["apartment", "terraced", "semi_detached", "detached", "bungalow", "maisonette"]
CONDITIONS = ["needs_work", "fair", "good", "renovated", "new_build"]
HEATING = ["gas", "electric", "heat_pump", "oil", "district"]


def generate(n_listings=15000, n_neighbourhoods=45, seed=21, out_dir="."):
    rng = np.random.default_rng(seed)
    nb_codes = [f"NB{i:03d}" for i in range(n_neighbourhoods)]
    neighbourhoods = pd.DataFrame({
        "neighbourhood_code": nb_codes,
        "median_income": np.exp(rng.normal(10.6, 0.3, n_neighbourhoods)).round(-2),
        "crime_index": rng.gamma(4, 12, n_neighbourhoods).round(1),
        "school_rating": rng.uniform(1, 10, n_neighbourhoods).round(1),
        "dist_city_centre_km": rng.gamma(2.5, 4, n_neighbourhoods).round(2),
    })

    nb = rng.choice(nb_codes, n_listings)
    ptype = rng.choice(PROPERTY_TYPES, n_listings, p=[0.3, 0.2, 0.2, 0.15, 0.08, 0.07])
    base_area = {"apartment": 65, "terraced": 90, "semi_detached": 110, "detached": 160,
                 "bungalow": 100, "maisonette": 80}
    floor_area = np.array([base_area[p] for p in ptype]) * np.exp(rng.normal(0, 0.25, n_listings))
    bedrooms = np.clip(np.round(floor_area / 30 + rng.normal(0, 0.7, n_listings)), 1, 7)
    bathrooms = np.clip(np.round(bedrooms / 2 + rng.normal(0, 0.5, n_listings)), 1, 4)
    year_built = rng.integers(1890, 2024, n_listings)
    condition = rng.choice(CONDITIONS, n_listings, p=[0.1, 0.25, 0.35, 0.2, 0.1])
    heating = rng.choice(HEATING, n_listings, p=[0.55, 0.2, 0.1, 0.1, 0.05])
    has_garden = (rng.uniform(size=n_listings) < np.where(ptype == "apartment", 0.15, 0.8)).astype(int)
    listings = pd.DataFrame({
        "listing_id": np.arange(1, n_listings + 1), "neighbourhood_code": nb, "property_type": ptype,
        "floor_area_m2": floor_area.round(1), "bedrooms": bedrooms, "bathrooms": bathrooms,
        "year_built": year_built, "condition": condition, "heating": heating, "has_garden": has_garden,
    })

    nbi = neighbourhoods.set_index("neighbourhood_code").loc[nb]
    nb_premium = dict(zip(nb_codes, rng.normal(0, 0.15, n_neighbourhoods)))
    cond_eff = dict(zip(CONDITIONS, [-0.25, -0.1, 0.0, 0.12, 0.2]))
    type_eff = dict(zip(PROPERTY_TYPES, [-0.05, 0.0, 0.05, 0.15, 0.08, -0.08]))
    log_price = (9.0
                 + 0.85 * np.log(floor_area)
                 + 0.6 * (np.log(nbi["median_income"].values) - 10.6)
                 - 0.004 * nbi["crime_index"].values
                 + 0.03 * nbi["school_rating"].values
                 - 0.35 * np.log1p(nbi["dist_city_centre_km"].values)
                 + np.array([nb_premium[n] for n in nb])
                 + np.array([cond_eff[c] for c in condition])
                 + np.array([type_eff[t] for t in ptype])
                 + 0.05 * has_garden
                 + 0.0015 * np.abs(year_built - 1960)
                 # negotiation / agent / timing effects not in the export
                 + rng.normal(0, 0.18, n_listings))
    listings["sale_price"] = np.round(np.exp(log_price), -3)

    listings.to_csv(f"{out_dir}/listings.csv", index=False)
    neighbourhoods.to_csv(f"{out_dir}/neighbourhoods.csv", index=False)


if __name__ == "__main__":
    generate()

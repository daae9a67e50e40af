"""Generate a synthetic plant-sensor table with dropouts (written to sensors.csv)."""
import numpy as np
import pandas as pd


def generate(path="sensors.csv", n_rows=6000, n_sensors=32, n_factors=6, seed=7):
    rng = np.random.default_rng(seed)
    # a handful of latent operating conditions drive all sensors
    z = rng.normal(size=(n_rows, n_factors))
    w1 = rng.normal(scale=0.8, size=(n_factors, 24))
    w2 = rng.normal(scale=0.5, size=(24, n_sensors))
    clean = np.tanh(z @ w1) @ w2
    # sensors come with their own offsets / units
    offsets = rng.uniform(-20, 80, size=n_sensors)
    scales = rng.uniform(0.5, 12.0, size=n_sensors)
    readings = offsets + scales * (clean + 0.05 * rng.normal(size=clean.shape))

    # random telemetry dropouts + a few flaky sensors that miss much more often
    drop_p = np.full(n_sensors, 0.15)
    flaky = rng.choice(n_sensors, size=5, replace=False)
    drop_p[flaky] = 0.45
    missing = rng.random((n_rows, n_sensors)) < drop_p
    readings = np.where(missing, np.nan, readings)

    cols = [f"s{i:02d}" for i in range(n_sensors)]
    df = pd.DataFrame(readings, columns=cols)
    df.insert(0, "row_id", np.arange(n_rows))
    df.to_csv(path, index=False, float_format="%.4f")
    return df


if __name__ == "__main__":
    df = generate()
    print(df.shape, "missing frac:", float(df.iloc[:, 1:].isna().mean().mean()))

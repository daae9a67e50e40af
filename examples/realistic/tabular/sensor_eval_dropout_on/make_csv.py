"""Regenerate machine_readings.csv (synthetic milling-machine sensor log with failure flag). Run once."""
import csv
import math
import os
import random

N = 3000
TYPES = ["L", "M", "H"]


def main(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "machine_readings.csv"), seed=5):
    rnd = random.Random(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["reading_id", "machine_type", "air_temp_k", "process_temp_k", "rotational_speed_rpm",
                    "torque_nm", "tool_wear_min", "failure"])
        for i in range(N):
            mtype = rnd.choices(TYPES, weights=[0.5, 0.3, 0.2])[0]
            air = rnd.gauss(300.0, 2.0)
            proc = air + 10.0 + rnd.gauss(0, 1.0)
            torque = max(3.0, rnd.gauss(40.0, 12.0))
            speed = max(1100, int(2860 - 25 * torque + rnd.gauss(0, 90)))
            wear = rnd.randint(0, 240)
            # overstrain: above ~58 Nm the spindle trips; a few trips/non-trips are sensor glitches
            failure = int(torque > 58.0)
            if rnd.random() < 0.003:
                failure = 1 - failure
            w.writerow([f"R{i:05d}", mtype, f"{air:.1f}", f"{proc:.1f}", speed, f"{torque:.1f}", wear, failure])


if __name__ == "__main__":
    main()

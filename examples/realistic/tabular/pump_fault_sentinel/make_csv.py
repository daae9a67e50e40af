"""Regenerate pump_readings.csv: synthetic centrifugal-pump sensor snapshots with a fault label.
A flaky logger writes -999 when a channel drops out. Run once."""
import csv
import random

random.seed(11)
N = 2400
FIELDS = ["flow_lpm", "p_in_bar", "p_out_bar", "vib_rms", "vib_peak", "current_a",
          "temp_c", "rpm", "fault"]

rows = []
for _ in range(N):
    fault = random.choices([0, 1, 2], weights=[0.5, 0.25, 0.25])[0]
    rpm = random.gauss(2950, 40)
    flow = random.gauss(420, 35)
    p_in = random.gauss(1.8, 0.15)
    p_out = random.gauss(6.2, 0.35)
    vib = abs(random.gauss(2.0, 0.35))
    current = random.gauss(31, 1.5)
    temp = random.gauss(58, 3)
    if fault == 1:  # bearing wear: vibration and heat up
        vib += random.uniform(0.9, 2.2)
        temp += random.uniform(3, 9)
        current += random.uniform(0.5, 2.0)
    elif fault == 2:  # cavitation: suction pressure and flow drop, spiky vibration
        p_in -= random.uniform(0.4, 0.9)
        flow -= random.uniform(40, 110)
        vib += random.uniform(0.2, 0.9)
    peak = vib * random.uniform(2.6, 3.2) + (random.uniform(1.0, 3.0) if fault == 2 else 0.0)
    row = [round(flow, 1), round(p_in, 3), round(p_out, 3), round(vib, 3), round(peak, 3),
           round(current, 2), round(temp, 2), round(rpm, 0)]
    if random.random() < 0.07:
        row[random.randrange(len(row))] = -999
    rows.append(row + [fault])

with open("pump_readings.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(FIELDS)
    w.writerows(rows)
bad = sum(1 for r in rows if -999 in r[:-1])
print(f"wrote {N} rows, {bad} with dropped channels")

"""Generate the two exports used by train.py:
  students.csv - registry export, one row per student in enrolment order, with the dropout outcome
  grades.csv   - first-year grades export from the exam office, grouped by programme
Run once; both files are committed."""
import csv

import numpy as np

N = 3000
PROGRAMMES = ["BIO", "CS", "ECO", "ENG", "HIS", "LAW", "MAT", "PSY"]


def main():
    rng = np.random.default_rng(11)
    sid = np.array([f"S{100000 + i * 7 + int(rng.integers(0, 7))}" for i in range(N)])
    age = np.clip(rng.normal(20.5, 2.5, N), 17, 45)
    scholarship = (rng.random(N) < 0.3).astype(int)
    commute = rng.gamma(2.0, 8.0, N)
    prog = rng.integers(0, len(PROGRAMMES), N)

    ability = rng.normal(0, 1, N)
    gpa1 = np.clip(2.7 + 0.55 * ability + rng.normal(0, 0.35, N), 0, 4)
    gpa2 = np.clip(gpa1 + rng.normal(-0.05, 0.35, N), 0, 4)
    attendance = np.clip(0.78 + 0.08 * ability + rng.normal(0, 0.1, N), 0.1, 1.0)
    credits = np.clip(np.round(45 + 10 * ability + rng.normal(0, 6, N)), 0, 60)

    z = (-1.2 - 1.6 * (gpa2 - 2.7) - 1.2 * (gpa2 - gpa1) - 4.0 * (attendance - 0.78)
         - 0.05 * (credits - 45) + 0.03 * (commute - 16) - 0.6 * scholarship + 0.06 * (age - 20.5))
    dropped = (rng.random(N) < 1 / (1 + np.exp(-z))).astype(int)

    with open("students.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "age", "scholarship", "commute_km", "dropped_out"])
        for i in range(N):
            w.writerow([sid[i], f"{age[i]:.1f}", scholarship[i], f"{commute[i]:.1f}", dropped[i]])

    order = np.lexsort((rng.random(N), prog))
    with open("grades.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["programme", "student_id", "gpa_sem1", "gpa_sem2", "credits_passed", "attendance"])
        for i in order:
            w.writerow([PROGRAMMES[prog[i]], sid[i], f"{gpa1[i]:.2f}", f"{gpa2[i]:.2f}",
                        int(credits[i]), f"{attendance[i]:.3f}"])
    print("dropout rate", dropped.mean())


if __name__ == "__main__":
    main()

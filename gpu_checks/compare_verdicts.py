"""Side by side: the verdicts of preflight records (overall status, every check's status, the
N/A notes), one column per record, and whether each group's columns are the same.

    python3 compare_verdicts.py NAME=record.json ... [-- NAME=record.json ...]

Records before `--` are one group (e.g. healthy runs), after it another (the fault hooks); the
exit status is 0 only when every group's records agree check by check."""

from __future__ import annotations

import json
import sys


def verdicts(path: str) -> dict[str, str]:
    with open(path) as f:
        record = json.load(f)
    out = {"(overall)": str(record.get("status"))}
    for c in record.get("checks") or []:
        out[c["name"]] = c["status"]
    for n in record.get("not_applicable") or []:
        out[f"{n['name']} (note)"] = n["status"]
    return out


def main(argv: list[str]) -> int:
    groups: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--":
            groups.append([])
        else:
            groups[-1].append(arg)
    same = True
    for group in groups:
        cols = [(a.split("=", 1)[0], verdicts(a.split("=", 1)[1])) for a in group]
        names = list(dict.fromkeys(n for _, v in cols for n in v))
        width = max(len(n) for n in names)
        print(f"{'check':<{width}}  " + "  ".join(f"{c:<14}" for c, _ in cols) + "  agree")
        for n in names:
            values = [v.get(n, "-") for _, v in cols]
            agree = len(set(values)) == 1
            same &= agree
            print(f"{n:<{width}}  " + "  ".join(f"{x:<14}" for x in values) +
                  f"  {'yes' if agree else 'NO'}")
        print()
    print("verdicts identical:", "yes" if same else "NO")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

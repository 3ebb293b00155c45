"""Per-record instructions and the functions they go to: callgrind runs at two record counts.

Usage: cgdiff.py SMALL.out LARGE.out RECORDS_DIFF [TOP]
"""

import re
import subprocess
import sys


def load(path):
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--auto=no", path], capture_output=True, text=True
    ).stdout
    total, funcs = None, {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        name = m.group(2)
        if name.startswith("=>") or "events annotated" in name:
            continue
        if name.startswith("PROGRAM TOTALS"):
            total = n
            continue
        name = re.sub(r"^\S*/(Python-3\.11\.7/)?", "", name.split(" [")[0])
        funcs[name] = funcs.get(name, 0) + n
    return total, funcs


small, large, d = sys.argv[1], sys.argv[2], int(sys.argv[3])
top = int(sys.argv[4]) if len(sys.argv) > 4 else 12
ts, fs = load(small)
tl, fl = load(large)
print(f"per record: {(tl - ts) / d:,.0f} instructions")
diffs = sorted(((fl.get(k, 0) - fs.get(k, 0)) / d, k) for k in set(fs) | set(fl))[::-1][:top]
for v, k in diffs:
    print(f"  {v:8,.0f}  {k[:110]}")

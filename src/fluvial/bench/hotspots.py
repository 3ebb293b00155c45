"""Reading a py-spy profile (collapsed stacks, ``--format raw``): where the time goes.

Each line of the profile is ``frame;frame;...;frame COUNT``, outermost frame first. A function's
*self* samples are those where it is the innermost frame; its *total* samples those where it is
anywhere on the stack (counted once per stack, so recursion does not inflate it).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def _function(frame: str) -> str:
    # py-spy writes "function (file.py:line)"; the line number splits one function in many.
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    short = "/".join(path.split("/")[-2:])
    return f"{name} ({short})"


def hotspots(path: Path, *, thread_filter: str = "") -> tuple[int, Counter[str], Counter[str]]:
    """(total samples, self samples per function, total samples per function)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        if thread_filter and thread_filter not in stack:
            continue
        count = int(count_text)
        frames = [_function(f) for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for function in set(frames):
            inclusive[function] += count
    return total, own, inclusive


def format_hotspots(path: Path, *, top: int = 25, thread_filter: str = "") -> str:
    total, own, inclusive = hotspots(path, thread_filter=thread_filter)
    if not total:
        return f"{path}: no samples"
    lines = [f"{path.name}: {total} samples", "", "self %   total %  function"]
    for function, count in own.most_common(top):
        lines.append(
            f"{100 * count / total:6.1f}  {100 * inclusive[function] / total:7.1f}   {function}"
        )
    lines += ["", "total %  function (inclusive)"]
    for function, count in inclusive.most_common(top):
        lines.append(f"{100 * count / total:6.1f}   {function}")
    return "\n".join(lines)

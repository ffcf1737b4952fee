"""Compare two `benchmarks/same_numbers.sh` outputs run by run: every metrics.jsonl row and
summary.json key must match, except wall-clock fields. Exit status 1 on any difference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

WALL_CLOCK = ("time", "sps", "per_s", "wall", "elapsed", "git_sha", "versions")


def _kept(record: dict) -> dict:
    return {k: v for k, v in record.items() if not any(w in k for w in WALL_CLOCK)}


def _rows(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [_kept(json.loads(line)) for line in lines if line.strip()]


def main(before: Path, after: Path) -> int:
    same = True
    for run in sorted(d for d in before.iterdir() if d.is_dir()):
        a, b = _rows(run), _rows(after / run.name)
        sa = _kept(json.loads((run / "summary.json").read_text()))
        sb = _kept(json.loads((after / run.name / "summary.json").read_text()))
        keys = len({k for r in a for k in r})
        verdict = "identical" if (a, sa) == (b, sb) else "DIFFERENT"
        print(
            f"{run.name}: {len(a)} rows x {keys} keys, summary: {verdict} "
            f"(final eval {sa.get('final_eval_return')} vs {sb.get('final_eval_return')})"
        )
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                print(
                    f"  first different row {i}:",
                    {k: (x.get(k), y.get(k)) for k in x.keys() | y.keys() if x.get(k) != y.get(k)},
                )
                break
        same &= (a, sa) == (b, sb)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))

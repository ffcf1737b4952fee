"""A third-party logger: every metrics event as a row of a CSV file in the run directory.

Selected by name with no YAML file: `roborl train logger=example_csv` (or
`logger=[jsonl,example_csv]`); its options come from `Config`, e.g.
`logger.example_csv.filename=train.csv`.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roborl.core.interfaces import Logger


@dataclass
class CsvLoggerConfig:
    filename: str = "metrics.csv"  # written inside the run directory


class CsvLogger(Logger):
    """One `step,key,value` row per metric, flushed per event so a crash loses nothing."""

    Config = CsvLoggerConfig

    def __init__(self, run_dir: str, config: Mapping[str, Any], **options: Any) -> None:
        cfg = CsvLoggerConfig(**options)
        self.path = Path(run_dir) / cfg.filename
        self._file = self.path.open("a", newline="")
        self._writer = csv.writer(self._file)
        if self._file.tell() == 0:
            self._writer.writerow(["step", "key", "value"])

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.writerow([step, key, value])
        self._file.flush()

    def close(self) -> None:
        self._file.close()

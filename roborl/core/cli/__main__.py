"""`python -m roborl.core.cli ...`: the `roborl` command without its console script."""

from roborl.core.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

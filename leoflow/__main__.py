"""``python -m leoflow`` is the same as the ``leoflow`` console script."""

from leoflow.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m judging score GROUPS.jsonl --judge-model M` — see judging/cli.py and docs/judging.md."""
from __future__ import annotations

import sys

from judging.cli import main

if __name__ == "__main__":
    sys.exit(main())

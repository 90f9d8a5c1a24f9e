"""`python -m training.model.hub OWNER/NAME --cache-dir DIR --endpoint URL`: fetch.py's command (its docstring)."""
from __future__ import annotations

import sys

from training.model.hub.fetch import main

sys.exit(main())

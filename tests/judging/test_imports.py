"""`judging` stays pure: importing it pulls in neither the web stack, the engine nor (yet) litellm."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_judging_leaves_django_training_and_litellm_out() -> None:
    code = ("import sys, judging, judging.agreement, judging.cli\n"
            "bad = [m for m in ('django', 'rest_framework', 'channels', 'celery', 'webapp', 'training', 'studio',"
            " 'litellm') if m in sys.modules]\n"
            "print(','.join(bad))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""

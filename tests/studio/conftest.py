"""Fixtures for the composition package's tests: the HTTP judge double (real litellm, real HTTP)."""
from __future__ import annotations

from tests.judge_double import judge_double  # noqa: F401  (re-exported fixture)

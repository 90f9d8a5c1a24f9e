from __future__ import annotations

from pathlib import Path

import pytest

from training.tiny_model import ensure_tiny_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny offline model, built once and cached under var/ (rebuilt when its recipe changes)."""
    return ensure_tiny_model(REPO / "var" / "test-cache" / "tiny-model")

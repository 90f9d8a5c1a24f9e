"""Serves the two vendored browser libraries straight from their Python wheels (no CDN, no copies in git)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage


def _vendor_files() -> list[Path]:
    import django_htmx
    import plotly

    return [
        Path(plotly.__file__).parent / "package_data" / "plotly.min.js",
        Path(django_htmx.__file__).parent / "static" / "django_htmx" / "htmx-2.min.js",
    ]


class VendorFinder(BaseFinder):
    """Exposes `vendor/plotly.min.js` and `vendor/htmx-2.min.js`."""

    prefix = "vendor"

    def check(self, **kwargs):  # type: ignore[override]
        return [Error(f"vendored asset missing: {p}") for p in _vendor_files() if not p.exists()]

    def find(self, path: str, find_all: bool = False, **kwargs):  # type: ignore[override]
        for file in _vendor_files():
            if path == f"{self.prefix}/{file.name}" and file.exists():
                return [str(file)] if find_all else str(file)
        return [] if find_all else None

    def list(self, ignore_patterns) -> Iterator[tuple[str, FileSystemStorage]]:  # type: ignore[override]
        for file in _vendor_files():
            storage = FileSystemStorage(location=str(file.parent))
            storage.prefix = self.prefix
            yield file.name, storage

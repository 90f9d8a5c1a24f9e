"""Fetching a base model from a Hugging Face hub into a worker's shared cache, before a run loads it.

`fetch.py` holds the whole of it: the hub's file listing (the model's size), the disk check, the download with
its progress, and the named errors (hub unreachable, a token needed, not enough disk). It runs as its own
process (`python -m training.model.hub`), so the hub's offline switch of the worker and the engine
(HF_HUB_OFFLINE) stays on for them while the download talks to the hub. Imports huggingface_hub only, lazily;
never django or judging.
"""
from __future__ import annotations

from training.model.hub.fetch import HubFetchError, cached_snapshot, size_text

__all__ = ["HubFetchError", "cached_snapshot", "size_text"]

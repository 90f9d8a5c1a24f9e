"""Rubric Studio's training engine: GRPO from judged groups (`rl`) and supervised fine-tuning (`sft`) on one LoRA
adapter, rollouts through an OpenAI-compatible server.

`train` (and its synchronous wrapper `run`) is the one entry for both run kinds: the CLI, the web app's engine
process and library callers start every run through it, and it hands each to its kind's loop.
Pure Python: never imports Django, the web app or the judge. Heavy imports (torch, transformers, peft, vllm)
happen inside the modules that need them, so `import training` is cheap.
Run it with `python -m training --help`.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from training.events import null_sink
from training.types import TrainingError

if TYPE_CHECKING:
    from training.config import RunConfig
    from training.events import Control, EventSink
    from training.model.checkpoints import RunSummary
    from training.model.gpu.sharing import GpuReader
    from training.rl.external import Inbox
    from training.types import ReviewHook, Scorer

__all__ = ["TrainingError", "run", "train"]


async def train(config: RunConfig, *, scorer: Scorer | None = None, sink: EventSink = null_sink,
                control: Control | None = None, review: ReviewHook | None = None,
                inbox: Inbox | None = None, gpu_reader: GpuReader | None = None) -> RunSummary:
    """Trains the run, of either kind: a GRPO run by training/rl/loop.py, an SFT run (`kind: "sft"`) by
    training/sft/loop.py, with the same events, checkpoints and summary. An `external` agent's groups arrive in
    `inbox` (training/rl/external.py). The run's experiment trackers (config.trackers) receive its events beside
    `sink` (training/monitoring/trackers.py). `gpu_reader` says what memory the worker's GPUs have (and have
    free): the memory plan's input (by default, the GPUs this process sees)."""
    # Imported here, not above: `import training` must not pull in torch (the web process imports it).
    from training.model.gpu import distributed
    from training.model.gpu.sharing import read_gpus
    from training.monitoring.trackers import tracking

    kind = {"scorer": scorer, "control": control, "review": review, "inbox": inbox,
            "gpu_reader": gpu_reader or read_gpus}
    if distributed.launched_rank() > 0:  # under torchrun only rank 0 reports
        return await _train_kind(config, sink=sink, **kind)
    with tracking(config, sink) as tracked:
        return await _train_kind(config, sink=tracked, **kind)


async def _train_kind(config: RunConfig, *, scorer: Scorer | None, sink: EventSink, control: Control | None,
                      review: ReviewHook | None, inbox: Inbox | None, gpu_reader: GpuReader) -> RunSummary:
    if config.kind == "sft":  # no review gate or inbox: nothing is scored while an SFT run trains
        from training.sft.loop import train_sft

        return await train_sft(config, scorer=scorer, sink=sink, control=control)
    from training.rl.loop import train_grpo

    return await train_grpo(config, scorer=scorer, sink=sink, control=control, review=review, inbox=inbox,
                            gpu_reader=gpu_reader)


def run(config: RunConfig, **kwargs: Any) -> RunSummary:
    """Synchronous wrapper around `train` for scripts and workers."""
    return asyncio.run(train(config, **kwargs))

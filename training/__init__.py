"""Rubric Studio's RL engine: rollouts through an OpenAI-compatible server, GRPO on a LoRA adapter.

Pure Python: never imports Django, the web app or the judge. Heavy imports (torch, transformers, peft, vllm)
happen inside the modules that need them, so `import training` is cheap.
Run it with `python -m training --help`.
"""
from training.types import TrainingError

__all__ = ["TrainingError"]

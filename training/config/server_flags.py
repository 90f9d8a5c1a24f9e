"""vLLM flags that would change the memory share the plan gives it: the plan (training/model/gpu/memory_plan.py) sets
`--gpu-memory-utilization` itself, so extra server arguments may not, in any spelling vLLM's parser accepts."""
from __future__ import annotations

# What sizes vLLM's memory: its share of the card, or its KV cache directly (which makes the share moot).
SHARE_FLAGS = ("--gpu-memory-utilization", "--kv-cache-memory-bytes", "--kv-cache-memory", "--num-gpu-blocks-override")
# argparse accepts any unambiguous prefix of a long flag; below this many characters vLLM's own flags overlap.
SHORTEST_PREFIX = len("--gpu-mem")


def share_flag(args: list[str]) -> str | None:
    """The first argument that sets vLLM's memory share, as written (`--gpu_memory_utilization=0.5` included),
    or None."""
    for arg in args:
        if not arg.startswith("--"):
            continue
        name = arg.split("=", 1)[0].replace("_", "-").lower()
        if any(flag == name or (len(name) >= SHORTEST_PREFIX and flag.startswith(name)) for flag in SHARE_FLAGS):
            return arg
    return None

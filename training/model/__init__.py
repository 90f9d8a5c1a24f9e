"""The model being trained, as every run kind sees it: the base model, its LoRA adapter and what they need of a GPU.
The adapter half of every trainer (`adapter`: base model, LoRA adapter, optimizer, log-probs, adapter files,
device and dtype), conversations into token ids with the agent's own tokens masked (`chat_format`; the families'
templates in `chat_templates/`), token log-probabilities (`logprobs`), micro-batches by a token budget and padding
(`batching`), checkpoints on disk (`checkpoints`), a merged export (`export`), a base model fetched from a hub into
a worker's cache (`hub/`), whether a run's prompt leaves room for its answers (`prompt_budget`), the base model's
checks before a run starts (`preflight`), and the GPUs a run takes (`gpu/`: memory plan, sharing, distributed).
May import training's top modules, and the environments package for their tools; never rl, sft, monitoring or
fixtures.
"""

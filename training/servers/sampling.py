"""Batched token sampling with a KV cache for the local inference server.

Prompts of different lengths are left-padded into one batch; every row samples until it emits a stop token or
reaches max_tokens. Returns the sampled ids and the log-probability of each under the model's distribution
(before temperature and top-p), as vLLM reports them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Sample:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (a stop token was sampled) or "length"


def _pick(logits: Any, temperature: float, top_p: float, generator: Any) -> Any:
    import torch

    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)  # [B, V]
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p  # always keeps the most likely token
        sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_batch(
    model: Any,
    prompts: list[list[int]],
    *,
    max_tokens: list[int],
    temperature: list[float],
    top_p: list[float],
    stop_ids: set[int],
    pad_id: int,
    generator: Any = None,
    on_step: Callable[[list[int], list[bool]], None] | None = None,
) -> list[Sample]:
    """`on_step`, when given, is called after every step with each row's sampled id and whether the row was still
    sampling (a streamed answer's tokens as they come; it costs one device-to-host read a step)."""
    import torch

    batch, width = len(prompts), max(len(p) for p in prompts)
    device = model.device  # the bookkeeping lives beside the model: on CUDA a CPU index is an error
    steps = max(max_tokens)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long, device=device)
    # Grows into its tail, one column a token.
    attention = torch.zeros((batch, width + steps), dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p):] = torch.tensor(p, device=device)
        attention[i, width - len(p):width] = 1
    positions = (attention[:, :width].cumsum(-1) - 1).clamp(min=0)
    # The per-token bookkeeping stays in tensors (one Python-level read at the end, not one per row and token).
    tokens = torch.zeros((batch, steps), dtype=torch.long, device=device)
    token_lps = torch.zeros((batch, steps), device=device)
    limits = torch.tensor(max_tokens, device=device)
    lengths = limits.clone()
    stopped = torch.zeros(batch, dtype=torch.bool, device=device)
    active = torch.ones(batch, dtype=torch.bool, device=device)
    stop_tensor = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    # One sampling call per distinct (temperature, top_p) keeps rows with different settings apart.
    settings = sorted(set(zip(temperature, top_p)))
    rows_of = {st: torch.tensor([i for i in range(batch) if (temperature[i], top_p[i]) == st], device=device)
               for st in settings}
    past = None
    with torch.inference_mode():
        for t in range(steps):
            out = model(input_ids=input_ids, attention_mask=attention[:, :width + t], position_ids=positions,
                        past_key_values=past, use_cache=True, logits_to_keep=1)  # only the last position's logits
            past = out.past_key_values
            logits = out.logits[:, -1].float()  # [B, V]
            if len(settings) == 1:
                chosen = _pick(logits, *settings[0], generator)
            else:
                chosen = torch.empty(batch, dtype=torch.long, device=device)
                for st in settings:
                    chosen[rows_of[st]] = _pick(logits[rows_of[st]], *st, generator)
            tokens[:, t] = chosen
            if on_step is not None:
                on_step(chosen.tolist(), active.tolist())
            token_lps[:, t] = torch.log_softmax(logits, dim=-1).gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
            hit_stop = active & torch.isin(chosen, stop_tensor)
            ended = hit_stop | (active & (limits <= t + 1))
            lengths[ended] = t + 1
            stopped |= hit_stop
            active &= ~ended
            if not active.any():
                break
            input_ids = chosen.unsqueeze(-1)
            attention[:, width + t] = 1
            positions = positions[:, -1:] + 1
    ids, lps, ns, hits = tokens.tolist(), token_lps.tolist(), lengths.tolist(), stopped.tolist()
    return [Sample(ids[i][:ns[i]], lps[i][:ns[i]], "stop" if hits[i] else "length") for i in range(batch)]

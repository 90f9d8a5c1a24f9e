"""Batched token sampling with a KV cache for the local inference server.

Prompts of different lengths are left-padded into one batch; every row samples until it emits a stop token or
reaches max_tokens. Returns the sampled ids and the log-probability of each under the model's distribution
(before temperature and top-p), as vLLM reports them.
"""
from __future__ import annotations

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
) -> list[Sample]:
    import torch

    batch, width = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p):] = torch.tensor(p)
        attention[i, width - len(p):] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    out_ids: list[list[int]] = [[] for _ in range(batch)]
    out_lps: list[list[float]] = [[] for _ in range(batch)]
    finish = ["length"] * batch
    active = torch.ones(batch, dtype=torch.bool)
    past = None
    with torch.no_grad():
        for t in range(max(max_tokens)):
            out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                        past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1].float()  # [B, V]
            logprobs = torch.log_softmax(logits, dim=-1)
            # One sampling call per distinct (temperature, top_p) keeps rows with different settings apart.
            chosen = torch.empty(batch, dtype=torch.long)
            for temp, tp in set(zip(temperature, top_p)):
                rows = torch.tensor([i for i in range(batch) if temperature[i] == temp and top_p[i] == tp])
                chosen[rows] = _pick(logits[rows], temp, tp, generator)
            for i in active.nonzero().flatten().tolist():
                tok = int(chosen[i])
                out_ids[i].append(tok)
                out_lps[i].append(float(logprobs[i, tok]))
                if tok in stop_ids:
                    finish[i] = "stop"
                    active[i] = False
                elif len(out_ids[i]) >= max_tokens[i]:
                    active[i] = False
            if not active.any():
                break
            input_ids = chosen.unsqueeze(-1)
            attention = torch.cat([attention, torch.ones((batch, 1), dtype=torch.long)], dim=-1)
            positions = positions[:, -1:] + 1
    return [Sample(out_ids[i], out_lps[i], finish[i]) for i in range(batch)]

"""GRPO as small pure functions (researchers call these directly; the names are public API).

Shapes: G = trajectories in a group, B = sequences in a batch, T = tokens per sequence.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.utils.checkpoint


def group_advantages(rewards: Sequence[float] | torch.Tensor, *, scale: bool | str = "none", std_floor: float = 0.1,
                     eps: float = 1e-6) -> torch.Tensor:
    """rewards [G] -> advantages [G]: r - mean(r), then by `scale`:

    "none" (or False): left as is (Dr. GRPO); "std" (or True): divided by (population std + eps);
    "std_floor": divided by max(std, std_floor), so a near-tie such as 0.80 vs 0.81 stays a small advantage
    instead of becoming ±1 (std scaling blows judge noise up to full-size signals).
    A group whose rewards are all equal gets all-zero advantages: it carries no learning signal.
    """
    mode = {True: "std", False: "none"}.get(scale, scale) if isinstance(scale, bool) else scale
    r = torch.as_tensor(rewards, dtype=torch.float32)  # [G]
    centered = r - r.mean()
    if mode == "none":
        return centered
    std = r.std(unbiased=False)
    if mode == "std":
        return centered / (std + eps)
    if mode == "std_floor":
        return centered / torch.clamp(std, min=std_floor)
    raise ValueError(f"unknown advantage scaling {scale!r}: none, std or std_floor")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float | None]]:
    """Clipped surrogate (+ beta × k3 KL to a reference), averaged over the unmasked tokens of the batch.

    logprobs, old_logprobs, ref_logprobs, mask, token_weights: [B, T]; advantages: [B].
    Per token: -min(ρA, clip(ρ, 1-eps_low, 1+eps_high)A) with ρ = exp(logprobs - old_logprobs).
    `old_logprobs=None` means on-policy (one epoch per step): the old policy is the current one, ρ is 1 with
    the gradient of logprobs, nothing can clip, and `clip_fraction` / `ratio_mean` are reported as None.
    `token_weights` (detached) multiply the surrogate per token, e.g. a truncated importance-sampling correction.
    """
    mask = mask.to(logprobs.dtype)
    tokens = mask.sum().clamp(min=1.0)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)  # [B, 1]
    on_policy = old_logprobs is None
    ratio = torch.exp(logprobs - (logprobs.detach() if on_policy else old_logprobs))  # [B, T]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)  # [B, T]
    if token_weights is not None:
        per_token = per_token * token_weights
    # The clip is active where the clipped branch is the smaller one and differs from the unclipped one.
    clip_active = ((ratio < 1.0 - eps_low) & (adv < 0)) | ((ratio > 1.0 + eps_high) & (adv > 0))
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None:
        delta = ref_logprobs - logprobs
        kl = torch.exp(delta) - delta - 1.0  # k3 estimator of KL(policy || reference), >= 0
        per_token = per_token + beta * kl
    loss = (per_token * mask).sum() / tokens
    metrics = {
        "clip_fraction": None if on_policy else float((clip_active.to(mask.dtype) * mask).sum() / tokens),
        "ratio_mean": None if on_policy else float((ratio.detach() * mask).sum() / tokens),
        "kl": float((kl.detach() * mask).sum() / tokens),
    }
    return loss, metrics


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """input_ids [B, T] -> log p(token t | tokens < t) [B, T] at the positions where `mask` [B, T] is set (0 elsewhere).

    Only the trained positions get logits: the transformer body gives hidden states, and the output layer runs
    on chunks of `chunk_tokens` of them, each as gather minus logsumexp in float32. A full-vocabulary float32
    log_softmax over every position (B×T×V) is never built. Logits are divided by the sampling `temperature`,
    as the sampler did, so the update is on-policy for any temperature (0, greedy, is treated as 1).
    `model` is a causal LM (a peft model is unwrapped to its base; its LoRA layers stay in place).
    `position_ids` [B, T] that restart at 0 mark packed sequences (SFT): with no attention mask, transformers
    then keeps each sequence's attention within itself.
    """
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    body, head = lm.get_decoder(), lm.get_output_embeddings()
    softcap = getattr(lm.config, "final_logit_softcapping", None)  # Gemma 2/3 cap their logits
    if position_ids is None:
        hidden = body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [B, T, H]
    else:  # no cache: with one, transformers would not look for packed sequences in the position ids
        hidden = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      use_cache=False).last_hidden_state
    wanted = torch.ones_like(input_ids, dtype=torch.bool) if mask is None else mask.bool()
    wanted = wanted.clone()
    wanted[:, 0] = False  # position 0 has no prediction
    rows, cols = wanted.nonzero(as_tuple=True)  # [N] each: position t is predicted from hidden state t-1
    states, targets = hidden[rows, cols - 1], input_ids[rows, cols]  # [N, H], [N]
    scale = temperature if temperature > 0 else 1.0

    def chunk_logprobs(states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:  # [n, H], [n] -> [n]
        logits = head(states).float()  # [n, V]
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        logits = logits / scale
        return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)

    picked = []
    # With several chunks, each is recomputed in the backward pass, so only one chunk's logits are ever alive,
    # not every chunk's. A single chunk's logits are alive in its backward either way: no recomputation then.
    recompute = torch.is_grad_enabled() and targets.numel() > chunk_tokens
    for start in range(0, targets.numel(), chunk_tokens):
        part = (states[start: start + chunk_tokens], targets[start: start + chunk_tokens])
        if recompute:
            picked.append(torch.utils.checkpoint.checkpoint(chunk_logprobs, *part, use_reentrant=False))
        else:
            picked.append(chunk_logprobs(*part))
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)  # [B, T]
    if picked:
        out = out.index_put((rows, cols), torch.cat(picked))
    return out

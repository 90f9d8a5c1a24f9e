"""Log-probabilities of a sequence's tokens under the model, without a full-vocabulary log-softmax: what the
GRPO loss (training/rl/grpo.py, which re-exports it as public API), the SFT step and the GPU activation probe
all compute.
"""
from __future__ import annotations

import torch
import torch.utils.checkpoint


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

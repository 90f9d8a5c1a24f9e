"""The GRPO trainer: the adapter trainer (training/model/adapter.py) updated from scored trajectory groups.

Memory is bounded by `grpo.micro_batch_tokens` (padded tokens per forward pass), not by the group size:
sequences are bucketed by length into micro-batches whose gradients accumulate, each weighted by its share of
the step's trained tokens, so the loss is the mean over all trained tokens of the step. The KL reference is
the same model with its adapter disabled. With one epoch per step the policy that sampled is the one being
trained, so no separate "old" log-prob pass is made and the clip metrics are reported as None.
"""
from __future__ import annotations

import contextlib
import math

import torch

from training.config import ChatConfig, GRPOConfig, LoraConfig, TrainerConfig
from training.model.adapter import AdapterTrainer
from training.model.batching import Row, micro_batches
from training.model.chat_format import encode_with_logprobs
from training.model.gpu import distributed
from training.rl.grpo import policy_loss
from training.types import TrajectoryGroup


def importance_metrics(ratio_sum: float, weight_sum: float, truncated: float, tokens: float, *,
                       cap: float | None) -> dict[str, float | None]:
    """What the importance correction did over the tokens with sampler log-probs: the mean of p_trainer/p_sampler
    (1 on-policy), the mean weight the loss applied (the ratio capped at `cap`; 1 with no correction) and the
    share of tokens whose ratio the cap truncated. None where no token had sampler log-probs."""
    if not tokens:
        return {"is_ratio_mean": None, "is_weight_mean": None, "is_truncated_fraction": None}
    return {"is_ratio_mean": ratio_sum / tokens, "is_weight_mean": weight_sum / tokens if cap is not None else 1.0,
            "is_truncated_fraction": truncated / tokens if cap is not None else None}


class Trainer(AdapterTrainer):
    """The adapter trainer with GRPO's step (`train_step`) on scored trajectory groups."""

    def __init__(self, base_model: str, lora: LoraConfig, grpo: GRPOConfig, *, device: str = "cpu",
                 seed: int = 0, options: TrainerConfig | None = None, temperature: float = 1.0,
                 chat: ChatConfig | None = None) -> None:
        self.grpo = grpo
        super().__init__(base_model, lora, learning_rate=grpo.learning_rate, adam_betas=grpo.adam_betas,
                         weight_decay=grpo.weight_decay, micro_batch_tokens=grpo.micro_batch_tokens, device=device,
                         seed=seed, options=options, temperature=temperature, chat=chat)

    def _rows(self, groups: list[TrajectoryGroup]) -> list[Row]:
        rows = []
        for group in groups:
            if group.skipped:
                continue
            for t in group.trajectories:
                if t.error or (not t.advantage and self.grpo.beta == 0):
                    continue  # no gradient from a zero advantage (unless its KL term pulls to the reference)
                ids, mask, lps = encode_with_logprobs(self.tokenizer, t.messages, t.tools, t.turn_token_ids,
                                                      t.turn_logprobs, end_ids=self.end_ids)
                if sum(mask) == 0:
                    continue
                if self.temperature not in (0.0, 1.0):
                    lps = [math.nan] * len(lps)  # servers report log-probs at temperature 1: not comparable
                n = self.max_length
                rows.append(Row(ids[:n], mask[:n], float(t.advantage or 0.0), lps[:n]))
        return rows

    def train_step(self, groups: list[TrajectoryGroup]) -> dict[str, float | None]:
        """One optimizer update (per epoch) over the step's trainable trajectories; returns metrics."""
        rank, world = distributed.rank_and_world()
        every = self._rows(groups)
        rows = every[rank::world]
        local_tokens = float(sum(r.trained_tokens for r in rows))
        total_tokens, total_rows = distributed.sum_over_ranks([local_tokens, float(len(rows))], self.device)
        if not total_rows:  # every group skipped: nothing to learn from, and the metrics say so
            return {"loss": None, "clip_fraction": None, "ratio_mean": None, "kl": None, "grad_norm": None,
                    "sampler_gap": None, **importance_metrics(0.0, 0.0, 0.0, 0.0, cap=self.options.tis_cap),
                    "trained_sequences": 0, "tokens": 0}
        micro = micro_batches(rows, max_tokens=self.grpo.micro_batch_tokens, max_rows=self.grpo.micro_batch_size)
        weights = [1.0] * len(micro)
        count = distributed.max_over_ranks(len(micro), self.device)
        while len(micro) < count:  # every rank must join every DDP gradient reduction: pad with weight-0 passes
            micro.append(micro[-1] if micro else [every[0]])
            weights.append(0.0)
        epochs = self.grpo.epochs_per_step
        olds, refs = [None] * len(micro), [None] * len(micro)
        if epochs > 1 or self.grpo.beta > 0:
            self.model.eval()  # no dropout while measuring the policy that sampled and the reference
            olds = [self._logprobs(mb) for mb in micro] if epochs > 1 else olds
            refs = [self._logprobs(mb, reference=True) for mb in micro] if self.grpo.beta > 0 else refs
            self.model.train()  # a mode switch walks every module: only made when something is measured
        sums = {"loss": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0, "kl": 0.0, "gap": 0.0, "gap_tokens": 0.0,
                "is_ratio": 0.0, "is_weight": 0.0, "is_truncated": 0.0}
        grad_norm = 0.0
        for _ in range(epochs):
            self.optimizer.zero_grad()
            for k, (mb, old, ref, weight) in enumerate(zip(micro, olds, refs, weights)):
                input_ids, mask, attention, sampler = self._tensors(mb)
                advantages = torch.tensor([r.advantage for r in mb], device=self.device)  # [B]
                sync = k == len(micro) - 1 or not hasattr(self.policy, "no_sync")
                with contextlib.nullcontext() if sync else self.policy.no_sync():
                    lp = self.policy(input_ids, attention, mask)
                    known = (mask > 0) & ~torch.isnan(sampler)
                    tis = None
                    # p_trainer / p_sampler per sampled token: ~1 on-policy, off 1 where the rollouts are stale.
                    ratio = torch.where(known, torch.exp(lp.detach() - torch.nan_to_num(sampler)), torch.ones_like(lp))
                    if self.options.tis_cap is not None and known.any():
                        tis = torch.where(known, ratio.clamp(max=self.options.tis_cap), ratio)
                    loss, metrics = policy_loss(lp, old, advantages, mask, eps_low=self.grpo.eps_low,
                                                eps_high=self.grpo.eps_high, ref_logprobs=ref, beta=self.grpo.beta,
                                                token_weights=tis)
                    share = weight * float(mask.sum()) / total_tokens
                    (loss * share * world).backward()  # × world: DDP averages gradients over ranks
                sums["loss"] += loss.item() * share / epochs
                for key in ("clip_fraction", "ratio_mean", "kl"):
                    sums[key] += (metrics[key] or 0.0) * share / epochs
                if weight:
                    sums["gap"] += float((lp.detach() - torch.nan_to_num(sampler)).abs()[known].sum()) / epochs
                    sums["gap_tokens"] += float(known.sum()) / epochs
                    sums["is_ratio"] += float(ratio[known].sum()) / epochs
                    sums["is_weight"] += float((ratio if tis is None else tis)[known].sum()) / epochs
                    if self.options.tis_cap is not None:
                        sums["is_truncated"] += float((ratio[known] > self.options.tis_cap).sum()) / epochs
            grad_norm = float(distributed.whole(torch.nn.utils.clip_grad_norm_(
                self.trained_params, self.grpo.max_grad_norm, foreach=True)))  # the norm over every rank's shard
            self.optimizer.step()
        if distributed.is_sharded(self.policy):
            self._gather_adapter()
        keys = ["loss", "clip_fraction", "ratio_mean", "kl", "gap", "gap_tokens",
                "is_ratio", "is_weight", "is_truncated"]
        loss, clip, ratio, kl, gap, gap_tokens, *importance = distributed.sum_over_ranks([sums[k] for k in keys],
                                                                                        self.device)
        informative = epochs > 1  # with one epoch the ratio is 1 and nothing clips
        return {"loss": loss, "clip_fraction": clip if informative else None,
                "ratio_mean": ratio if informative else None,
                "kl": kl, "grad_norm": grad_norm, "sampler_gap": gap / gap_tokens if gap_tokens else None,
                **importance_metrics(*importance, gap_tokens, cap=self.options.tis_cap),
                "trained_sequences": int(total_rows), "tokens": int(total_tokens)}

"""The shape of a decoder-only model as its config.json gives it (no weights): what the memory plan counts and
what the activation probe builds at a small width."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.types import TrainingError

# The tokens per sequence the plan budgets the KV cache for when server.max_model_len is unset.
DEFAULT_MAX_MODEL_LEN = 4096


@dataclass(frozen=True)
class ModelShape:
    """The fields of a decoder-only model's config.json that decide its memory."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool
    max_positions: int
    model_type: str = ""  # transformers' name of the architecture: what the activation probe builds

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "ModelShape":
        try:
            hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
            return cls(hidden=hidden, layers=int(cfg["num_hidden_layers"]), heads=heads,
                       kv_heads=int(cfg.get("num_key_value_heads") or heads),
                       head_dim=int(cfg.get("head_dim") or hidden // heads),
                       intermediate=int(cfg["intermediate_size"]), vocab=int(cfg["vocab_size"]),
                       tied=bool(cfg.get("tie_word_embeddings", False)),
                       # Qwen2's config does not say it, but its q/k/v projections carry a bias.
                       qkv_bias=bool(cfg.get("attention_bias", cfg.get("model_type") in ("qwen2", "qwen2_moe"))),
                       max_positions=int(cfg.get("max_position_embeddings") or DEFAULT_MAX_MODEL_LEN),
                       model_type=str(cfg.get("model_type") or ""))
        except (KeyError, TypeError, ValueError) as err:
            raise TrainingError(f"the base model's config.json lacks a field the memory plan needs: {err}") from None

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer, by its module name."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (self.hidden, q), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                "o_proj": (q, self.hidden), "gate_proj": (self.hidden, self.intermediate),
                "up_proj": (self.hidden, self.intermediate), "down_proj": (self.intermediate, self.hidden)}

    def linear_params(self) -> int:
        """Parameters of the decoder layers' projections (what 4-bit quantisation shrinks)."""
        per_layer = sum(i * o for i, o in self.projections().values())
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return self.layers * (per_layer + bias)

    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        norms = self.layers * 2 * self.hidden + self.hidden
        return self.linear_params() + embeddings + norms

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes  # keys and values


def config_json(base_model: str) -> Path | None:
    """The base model's config.json: a directory's, or the local Hugging Face cache's; None when neither has it."""
    path = Path(base_model).expanduser() / "config.json"
    if path.is_file():
        return path
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(base_model, "config.json")
    except ValueError:  # not a repo id
        return None
    return Path(cached) if isinstance(cached, str) else None


def read_shape(base_model: str) -> ModelShape:
    """The shape from the base model's config.json (config_json)."""
    if (path := config_json(base_model)) is None:
        raise TrainingError(f"no config.json for base model {base_model!r} (neither a directory nor in the "
                            "local Hugging Face cache): the memory plan needs its shape")
    try:
        return ModelShape.from_config(json.loads(path.read_text()))
    except (OSError, ValueError) as err:
        raise TrainingError(f"cannot read {path}: {err}") from None

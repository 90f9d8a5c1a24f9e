"""One adapter folded into a plain copy of the base model, so the local server samples it without peft.

peft applies a LoRA adapter on every forward pass: each adapted linear layer runs the base layer plus two more
matmuls and peft's own Python. On the small models the local server runs, that dispatch is a third of a sampled
token's time. Folding the adapter in (W' = W + scaling · B A, one addmm per layer, a few ms per load on the
tiny model) gives the same function with one plain linear layer per module. The server keeps one such copy,
for the adapter loaded last (the one a training run samples from next); other adapters and the base are served
through peft as before.

Adapters that are not plain LoRA on linear layers (DoRA, LoRA on embeddings, convolutions or GPT-2's transposed
layers, trained biases or extra modules) are not folded: `fold` says so and the server keeps using peft for them.
"""
from __future__ import annotations

import copy
from typing import Any


def foldable(config: dict[str, Any]) -> bool:
    """Whether an adapter (its adapter_config.json) is plain LoRA: no trained biases or extra trained modules."""
    return (config.get("bias", "none") == "none" and not config.get("modules_to_save")
            and not config.get("use_dora") and not config.get("trainable_token_indices"))


class FoldedCopy:
    """A copy of the base model's modules, made before peft adapts the base in place. It shares every weight
    with the base until `fold` gives an adapted layer weights of its own, so it costs the adapted layers' memory."""

    def __init__(self, base: Any) -> None:
        shared = {id(t): t for t in [*base.parameters(), *base.buffers()]}
        self.model = copy.deepcopy(base, shared).eval()
        # Each of the base's modules and its copy: peft keeps the base's linear layers as its `base_layer`s.
        self._twin = {id(a): b for a, b in zip(base.modules(), self.model.modules())}
        self._layers: list[Any] = []

    def find_layers(self, peft_model: Any) -> None:
        """Records peft's LoRA layers; call it whenever peft has built new ones (a refill builds none)."""
        from peft.tuners.lora.layer import LoraLayer

        self._layers = [m for m in peft_model.modules() if isinstance(m, LoraLayer)]

    def fold(self, peft_name: str) -> bool:
        """Makes the copy compute the base with adapter `peft_name` applied; False (and the copy not to be used)
        where the adapter is not plain LoRA on linear layers. Layers that only other adapters adapt are set back
        to the base weight."""
        import torch
        from peft.tuners.lora.layer import Linear as LoraLinear

        pairs = []
        for layer in self._layers:
            mine = peft_name in layer.lora_A or peft_name in layer.lora_embedding_A
            target = self._twin.get(id(layer.get_base_layer()))
            if mine and (type(layer) is not LoraLinear or layer.use_dora.get(peft_name) or layer.fan_in_fan_out):
                return False
            if target is None or getattr(target, "weight", None) is None:
                return False
            pairs.append((target, layer, mine))
        if not any(mine for _, _, mine in pairs):
            return False
        with torch.no_grad():
            for target, layer, mine in pairs:
                base_weight = layer.get_base_layer().weight
                if not mine:
                    target.weight = base_weight
                    continue
                if target.weight is base_weight:
                    target.weight = torch.nn.Parameter(torch.empty_like(base_weight), requires_grad=False)
                a, b = (m[peft_name].weight.to(base_weight.dtype) for m in (layer.lora_A, layer.lora_B))
                torch.addmm(base_weight, b, a, alpha=layer.scaling[peft_name], out=target.weight)
        return True

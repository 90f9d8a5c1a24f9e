"""What the engine measures about GPUs before it takes one: the activation probe behind the memory plan's
activation and logits terms (`activation_probe`), the terms the plan reads (`activation_terms`), and the vLLM
flags that would override the planned memory share (`server_flags`). May import torch, transformers and peft
(lazily, inside functions) and training's own modules; never Django, the web app or judging."""

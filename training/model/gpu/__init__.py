"""What the model needs of a GPU: the memory plan worked out from configs alone (`memory_plan`), the activation probe
behind its activation and logits terms (`activation_probe`, `activation_terms`), a model's shape read from its config
(`model_shape`), how a run's vLLM and trainer share a worker's GPUs (`sharing`), and several processes training one
run (`distributed`). May import torch, transformers and peft (lazily, inside functions), training's top modules and
the rest of the model package; never a run kind, Django, the web app or judging."""

"""Supervised fine-tuning: the `sft` run kind (`loop`, top to bottom) over conversations read and checked row by
row (`data`), packed by a token budget (`packing`) and trained on the LoRA adapter of the RL trainer (`trainer`),
with its options (`config`); distillation from a teacher, filtered by the rubric (`distill`); and whole-model SFT
that warms up the offline fixtures (`whole_model`).
May import training's top modules and its model, gpu, servers and environments packages, and from rl the adapter
trainer it extends and the after-step checks (held-out evaluation, monitors) that every run kind shares. Never
Django, the web app or judging.
"""

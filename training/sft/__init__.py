"""Supervised fine-tuning: the `sft` run kind (`loop`, top to bottom) over conversations read and checked row by
row (`data`), packed by a token budget (`packing`) and trained on the shared LoRA adapter trainer (`trainer`,
on training/model/adapter.py), with its options (`config`); distillation from a teacher, filtered by the rubric
(`distill`); and whole-model SFT that warms up the offline fixtures (`whole_model`).
May import training's top modules and its model, monitoring (held-out evaluation, after-step checks), servers and
environments packages. Never the RL package, Django, the web app or judging.
"""

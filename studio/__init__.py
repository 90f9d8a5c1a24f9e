"""Composition: the only package that may import both `training` and `judging` (DESIGN §1).

`studio.scoring` turns a run config's `judge` section into a scorer for the training loop; the engine finds
it through the `rubric_studio.scorers` entry point, so `training` never imports `judging`.
"""

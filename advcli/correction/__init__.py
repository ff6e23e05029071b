"""Rollout correction (verl's algorithm.rollout_correction, OpenRLHF's IS coefficient): its keys, its
plan in a run, its math. Its statistics passes are stages of the engines (pipeline/correction_pass.py,
engines/ray_correction_pass.py)."""

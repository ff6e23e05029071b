"""``--flavor open-instruct``: Ai2's open-instruct GRPO trainer (allenai/open-instruct @ e6c3044a;
``StreamingDataLoaderConfig`` in ``open_instruct/data_loader.py``, advantages in
``DataPreparationActor._data_preparation_loop`` L1471-1484).

open-instruct groups by position: the step's scores reshaped to ``(-1, num_samples_per_prompt_rollout)``,
so the canonical grouping is ``grouping.by=position`` with ``grouping.size=n``. In numpy (float64)::

    mean = scores_per_prompt.mean(axis=-1);  std = scores_per_prompt.std(axis=-1)   (ddof 0)
    standard:  A = (s − mean) / (std + 1e-8)
    centered:  A = s − mean                                                   (the default)

which is advcli's ``grpo`` with the population std (``std=population``) and ``eps=1e-8``, or without the
division (Dr.GRPO's ``norm_by_std=false``). ``num_samples_per_prompt_rollout=1``: open-instruct refuses it
with ``filter_zero_std_samples`` (its default; data_loader.py L518-522) and otherwise runs it, every group of
one getting s − s = 0 (``singleton=zero``). No KL in the reward, no whitening: the advantage is placed on the
response tokens of the packed sequence.
"""
from __future__ import annotations

from ..config import Key, default_config
from ..errors import AdvcliError
from . import Flavor

TYPES = ("standard", "centered")

KEYS = {
    "advantage_normalization_type": Key("centered", "`centered`: A = s − group mean; `standard`: A = (s − group "
                                        "mean)/(group std + 1e-8), the std numpy's (ddof 0)", TYPES, "str"),
    "num_samples_per_prompt_rollout": Key(4, "group size n: consecutive rows per prompt (scores.reshape(-1, n))",
                                          None, "int"),
    "filter_zero_std_samples": Key(True, "drop groups whose rewards are all equal before training (which rows reach "
                                   "the dump); with num_samples_per_prompt_rollout=1 open-instruct refuses it "
                                   "(every group of one would be dropped)", None, "bool"),
}
# keys of StreamingDataLoaderConfig that decide which rows reach the dump, not their numbers: a --config file
# may hold them (the dump already has the rows they kept)
UNREAD = ("mask_truncated_completions", "active_sampling", "no_resampling_pass_rate",
          "num_unique_prompts_rollout", "async_steps", "save_traces", "rollouts_save_path", "mask_tool_use")


def translate(v: dict) -> dict:
    cfg = default_config()
    n = v["num_samples_per_prompt_rollout"]
    if n < 1:  # data_loader.py L504 @e6c3044a: assert num_samples_per_prompt_rollout > 0
        raise AdvcliError(f"key num_samples_per_prompt_rollout={n}: open-instruct needs at least one sample per "
                          "prompt", hint="set the group size the run used, e.g. --set num_samples_per_prompt_rollout=4")
    if n == 1 and v["filter_zero_std_samples"]:  # data_loader.py L518-522 @e6c3044a
        raise AdvcliError("key num_samples_per_prompt_rollout=1 with filter_zero_std_samples=true (its default): "
                          "open-instruct refuses this (a group of one has reward std 0, so every sample would be "
                          "filtered)", hint="set the group size the run used (e.g. --set num_samples_per_prompt_"
                          "rollout=4), or, for a run with filter_zero_std_samples off, --set "
                          "filter_zero_std_samples=false: every advantage is then 0, as open-instruct computes it")
    cfg["grouping"].update(by="position", size=n)
    cfg["reward"]["source"] = "reward"
    standard = v["advantage_normalization_type"] == "standard"
    cfg["estimator"] = {"name": "grpo", "norm_by_std": standard, "std": "population", "eps": 1e-8,
                        "singleton": "zero"}
    # numpy float64: Batch.scores is list[float] (model_utils.py L128) and np.array of it float64
    # (data_loader.py L1472-1484), so an all-equal group has mean exactly its value and std 0: A = 0. In float32
    # the mean's residue (~6e-8) divided by a residue std + 1e-8 is of order 1 (0.9 x 3 -> 0.856)
    cfg["precision"] = "float64"
    return cfg


def estimator_note(v: dict) -> str | None:
    t = v["advantage_normalization_type"]
    return (f"advantage_normalization_type={t} is open-instruct's group "
            + ("z-score with numpy's population std: advcli's grpo (std=population, eps=1e-8)" if t == "standard"
               else "centring (no std): advcli's grpo with norm_by_std=false"))


FLAVOR = Flavor(
    title="open-instruct",  # the framework's name in prose (help, docs)
    name="open-instruct",
    framework="allenai/open-instruct @ e6c3044a (open_instruct/data_loader.py, rl_utils.py)",
    keys=KEYS, translate=translate, estimator_note=estimator_note, group_size_key="num_samples_per_prompt_rollout",
    unread=UNREAD, audit_switches={"advantage_normalization_type": ("standard", "centered")},
    notes="Groups are num_samples_per_prompt_rollout consecutive rows of a step (scores.reshape(-1, n)); "
          "centered (default): A = s − mean_g(s); standard: A = (s − mean_g(s))/(std_g(s) + 1e-8) with numpy's "
          "population std (ddof 0), float64 in open-instruct (advcli: float32 statistics). No KL in the reward, "
          "no whitening, no clipping; one advantage per sample, on its response tokens. Groups of one are "
          "refused (open-instruct gives them 0).")

"""`--config` with a trainer's whole training configuration (issue 28, part 8): the flavor takes the keys
it knows, names the sections it ignores in one line, and still refuses a misspelling inside a section it
reads; a file that does not parse is refused naming its line and column.

The YAML below follows verl's own ``verl/trainer/config/ppo_trainer.yaml`` (verl-project/verl @ 05a1edd6):
its top-level sections and, in ``algorithm``, its keys with Hydra's ``_target_`` entries."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_main
from test_format_verl import v1_records, write

PPO_TRAINER_YAML = """\
defaults:
  - actor@actor_rollout_ref.actor: dp_actor
  - _self_
data:
  tokenizer: null
  train_files: ~/data/gsm8k/train.parquet
  train_batch_size: 1024
  max_prompt_length: 512
actor_rollout_ref:
  hybrid_engine: true
  model:
    path: ~/models/deepseek-llm-7b-chat
  actor:
    strategy: fsdp
    ppo_mini_batch_size: 256
    use_kl_loss: false
  rollout:
    name: vllm
    n: 3
critic:
  optim:
    lr: 1e-5
reward_model:
  enable: false
algorithm:
  _target_: verl.trainer.config.AlgoConfig
  gamma: 1.0
  lam: 1.0
  adv_estimator: grpo
  norm_adv_by_std_in_grpo: {norm_by_std}
  filter_groups:
    _target_: verl.trainer.config.FilterGroupsConfig
    enable: false
    metric: reward
  use_kl_in_reward: false
  kl_penalty: kl
  kl_ctrl:
    _target_: verl.trainer.config.KLControlConfig
    type: fixed
    kl_coef: 0.001
    horizon: 10000
    target_kl: 0.1
  use_pf_ppo: false
  pf_ppo:
    reweight_method: pow
    weight_pow: 2.0
trainer:
  total_epochs: 30
  project_name: verl_examples
  logger: ["console", "wandb"]
  n_gpus_per_node: 8
ray_init:
  num_cpus: null
"""
# actor_rollout_ref is read for actor.use_kl_loss (verl 0.2-0.3 put the KL in the reward unless it was on): its
# other keys are ignored as its rest, actor_rollout_ref.*
# reward_model is read (the DAPO reward manager's keys, under their older section): its other keys are ignored
IGNORED_SECTIONS = ["defaults", "data", "critic", "trainer", "ray_init"]


def _dump(tmp_path):
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 7)  # 4 prompts × 3 sessions, scores in {0, 0.5, 1}
    write(d / "1.jsonl", recs)
    return d, recs


def test_full_verl_ppo_trainer_yaml_runs(tmp_path, capsys):
    d, recs = _dump(tmp_path)
    cfg = tmp_path / "ppo_trainer.yaml"
    cfg.write_text(PPO_TRAINER_YAML.format(norm_by_std="false"))
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--config", cfg, "--json"], capsys)
    assert code == 0, err
    # the file's algorithm keys were taken: grpo without the std, A_i = s_i − mean of its group
    scores = [r["score"] for r in recs]
    group = [r["uid"].rsplit("_", 2)[0] for r in recs]
    want = [s - np.mean([t for t, h in zip(scores, group) if h == g]) for s, g in zip(scores, group)]
    got = pq.read_table(out).column("advantages").to_pylist()  # response-level dump: one advantage a row
    assert np.allclose(got, want, rtol=1e-6, atol=1e-6)
    rep = json.loads(stdout)
    assert rep["settings"]["algorithm.norm_adv_by_std_in_grpo"] is False
    cf = rep["config_file"]
    assert cf["ignored_sections"] == IGNORED_SECTIONS
    assert cf["ignored_keys"] == ["actor_rollout_ref.*", "reward_model.*", "algorithm._target_",
                                  "algorithm.filter_groups", "algorithm.kl_ctrl._target_", "algorithm.pf_ppo"]
    assert "algorithm.adv_estimator" in cf["taken"] and "actor_rollout_ref.actor.use_kl_loss" in cf["taken"]
    assert len(cf["taken"]) == 12


def test_ignored_sections_are_one_summary_line(tmp_path, capsys):
    d, _ = _dump(tmp_path)
    cfg = tmp_path / "ppo_trainer.yaml"
    cfg.write_text(PPO_TRAINER_YAML.format(norm_by_std="true"))
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--config", cfg], capsys)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("config ")]
    assert len(lines) == 1
    text = " ".join(" ".join(err.split("config ", 1)[1].split("input ", 1)[0].split()).split())
    assert "ignored sections " + ", ".join(IGNORED_SECTIONS) + " (--flavor verl reads none of their keys)" in text
    # actor_rollout_ref.actor.use_kl_loss is taken: the section's rest is what is ignored, said so
    assert "keys actor_rollout_ref.* other than the key(s) taken, reward_model.*, algorithm._target_" in text, text


@pytest.mark.parametrize("old, new, named", [
    ("  adv_estimator: grpo", "  adv_estimater: grpo", ("'algorithm.adv_estimater'", "'algorithm.adv_estimator'")),
    ("    kl_coef: 0.001", "    kl_coeff: 0.001", ("'algorithm.kl_ctrl.kl_coeff'", "'algorithm.kl_ctrl.kl_coef'")),
    ("algorithm:", "algoritm:", ("section 'algoritm'", "Did you mean 'algorithm'")),
])
def test_misspelling_in_a_read_section_is_refused(tmp_path, capsys, old, new, named):
    d, _ = _dump(tmp_path)
    cfg = tmp_path / "ppo_trainer.yaml"
    text = PPO_TRAINER_YAML.format(norm_by_std="true")
    assert old in text
    cfg.write_text(text.replace(old, new, 1))
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--config", cfg], capsys)
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert str(cfg) in err and all(n in err for n in named), err


def test_set_still_refuses_keys_the_file_may_hold(tmp_path, capsys):
    d, _ = _dump(tmp_path)
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl",
                             "--set", "algorithm.filter_groups.enable=false"], capsys)
    assert code == 2 and "'algorithm.filter_groups.enable'" in err


def test_flat_flavor_config(tmp_path, capsys):
    """ROLL's keys are top-level: its other top-level keys are ignored, a near miss of one is refused."""
    from advcli.flavors import resolve

    cfg = tmp_path / "rlvr.yaml"
    # actor_infer holds the inference worker's setup beside the group size: its other keys are ignored (ROLL's
    # examples/*/rlvr_config.yaml set model_args, strategy_args and more generating_args there), a near miss of
    # num_return_sequences is refused
    cfg.write_text("exp_name: qwen_rlvr\nmax_steps: 500\npretrain: Qwen/Qwen2.5-7B\nadv_estimator: reinforce\n"
                   "num_return_sequences_in_group: 8\n"
                   "actor_infer:\n  model_args:\n    flash_attn: fa2\n  generating_args:\n"
                   "    num_return_sequences: ${num_return_sequences_in_group}\n    temperature: 0.99\n")
    found: list = []
    c, given = resolve("roll", [], str(cfg), found)
    assert given["actor_infer.generating_args.num_return_sequences"] == 8 and "actor_infer.*" in found[0].ignored_keys
    cfg.write_text("adv_estimator: reinforce\nactor_infer:\n  generating_args:\n    num_return_sequence: 8\n")
    with pytest.raises(Exception) as e:
        resolve("roll", [], str(cfg))
    assert "'actor_infer.generating_args.num_return_sequence'" in str(e.value)
    cfg.write_text("exp_name: qwen_rlvr\nmax_steps: 500\nadv_estimator: reinforce\ngama: 0.9\n")
    found = []
    with pytest.raises(Exception) as e:
        resolve("roll", [], str(cfg), found)
    assert "'gama'" in str(e.value) and "'gamma'" in str(e.value)
    cfg.write_text("exp_name: qwen_rlvr\nmax_steps: 500\nadv_estimator: reinforce\ngamma: 0.9\n")
    c, given = resolve("roll", [], str(cfg), found)
    assert given == {"adv_estimator": "reinforce", "gamma": 0.9} and c["estimator"]["gamma"] == 0.9
    assert found[0].ignored_sections == ["exp_name", "max_steps"]


@pytest.mark.parametrize("suffix, text, place", [
    # the flow sequence opened on line 3 meets "lam:" on line 4 (column 6, after 5 characters)
    (".yaml", "algorithm:\n  adv_estimator: grpo\n  gamma: [1, 2\n  lam: 3\n", "line 4, column 6"),
    # "lam = = 1": the value starts at column 7 with a second "="
    (".toml", "[algorithm]\ngamma = 0.9\nlam = = 1\n", "line 3, column 7"),
])
def test_unparsable_config_names_line_and_column(tmp_path, capsys, suffix, text, place):
    d, _ = _dump(tmp_path)
    cfg = tmp_path / ("run" + suffix)
    cfg.write_text(text)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--config", cfg], capsys)
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert f"config file {cfg}, {place}: cannot parse" in err, err


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_a_config_not_in_utf8_or_a_directory_is_named_and_a_bom_is_read(tmp_path, capsys, suffix):
    """A Latin-1 byte in the file was an internal error (UnicodeDecodeError; validate --json printed no verdict),
    a directory 'no such file'; a UTF-8 file that starts with a BOM (Windows editors) is read as its text."""
    d, _ = _dump(tmp_path)
    body = "algorithm:\n  adv_estimator: grpo # caf\u00e9\n" if suffix == ".yaml" else \
        "[algorithm]\nadv_estimator = \"grpo\" # caf\u00e9\n"
    cfg = tmp_path / ("latin" + suffix)
    cfg.write_bytes(body.encode("latin-1"))
    code, out, err = run_main(["validate", d, "--flavor", "verl", "--config", cfg, "--json"], capsys)
    assert code == 2 and json.loads(out)["error"] == f"config file {cfg}, line 2: not UTF-8 text (byte 0xe9)"
    code, _, err = run_main(["validate", d, "--flavor", "verl", "--config", tmp_path], capsys)
    assert code == 2 and f"config file {tmp_path}: is a directory" in err, err
    cfg.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    code, _, err = run_main(["validate", d, "--flavor", "verl", "--config", cfg], capsys)
    assert code == 0, err


def test_config_estimator_without_flavor_is_not_overridden(tmp_path, capsys):
    """No --flavor: verl, and the estimator the file names — not the one advcli picks from the dump."""
    d, recs = _dump(tmp_path)
    cfg = tmp_path / "ppo_trainer.yaml"
    cfg.write_text(PPO_TRAINER_YAML.format(norm_by_std="true").replace("adv_estimator: grpo", "adv_estimator: rloo"))
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", d, "-o", out, "--config", cfg, "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["estimator"]["name"] == "rloo"
    # verl rloo: A_i = s_i − mean of the other rows of its group
    scores = [r["score"] for r in recs]
    group = [r["uid"].rsplit("_", 2)[0] for r in recs]
    want = []
    for i, (s, g) in enumerate(zip(scores, group)):
        others = [t for j, (t, h) in enumerate(zip(scores, group)) if h == g and j != i]
        want.append(s - sum(others) / len(others))
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("flavor, settings", [
    ("openrlhf", {}),  # records its rollout correction's notes (rollout_correction.unused) beside its keys
    ("verl", {"algorithm.adv_estimator": "gae"}),  # resolves estimator parameters the user did not give
    ("nemo", {}),
])
def test_a_recorded_configuration_fed_back_reproduces_the_run(flavor, settings, tmp_path, capsys, sample_path):
    """What an output records (and result.config, the same dict) is a --config file of --flavor advcli that
    gives the same numbers: the openrlhf run's notes on its correction were refused as unknown keys."""
    import yaml

    import advcli

    out = tmp_path / "out.parquet"
    result = advcli.run(sample_path, str(out), flavor=flavor, settings=settings)
    recorded = json.loads(pq.ParquetFile(out).schema_arrow.metadata[b"advcli"])["config"]
    assert json.loads(json.dumps(result.config)) == recorded
    cfg = tmp_path / "recorded.yaml"
    cfg.write_text(yaml.safe_dump(recorded))
    back = tmp_path / "back.parquet"
    code, _, err = run_main(["run", sample_path, "-o", str(back), "--flavor", "advcli", "--config", str(cfg)], capsys)
    assert code == 0, err
    for col in ("advantages", "returns"):
        assert pq.read_table(back).column(col).equals(pq.read_table(out).column(col))


# NeMo RL's example configs (examples/configs/*.yaml @7ea279ab) are written this way: a child file naming its parent
# in `defaults`, the grpo section mixing the loop's settings with the estimator's, the estimator's flags
# interpolated from the loop's (`${grpo.normalize_rewards}`), and reward scaling beside them.
NEMO_PARENT = """\
grpo:
  num_prompts_per_step: 32
  num_generations_per_prompt: 16
  max_num_steps: 1000000
  normalize_rewards: true
  use_leave_one_out_baseline: true
  val_period: 10
  overlong_filtering: false
  use_dynamic_sampling: false
  reward_shaping:
    enabled: false
    overlong_buffer_length: 128
    overlong_buffer_penalty: 1
    max_response_length: ${policy.max_total_sequence_length}
  reward_scaling:
    enabled: false
    source_min: 0.0
    source_max: 1.0
    target_min: 0.0
    target_max: 1.0
  async_grpo:
    enabled: false
  adv_estimator:
    name: "grpo"
    normalize_rewards: ${grpo.normalize_rewards}
    use_leave_one_out_baseline: ${grpo.use_leave_one_out_baseline}
    minus_baseline: true
loss_fn:
  reference_policy_kl_penalty: 0.01
  ratio_clip_min: 0.2
  use_importance_sampling_correction: false
policy:
  model_name: "Qwen/Qwen2.5-1.5B"
  max_total_sequence_length: 512
"""
NEMO_CHILD = """\
defaults: parent.yaml
grpo:
  use_leave_one_out_baseline: false
  reward_scaling:
    enabled: true
    source_min: 0.0
    source_max: 1.0
    target_min: -1.0
    target_max: 1.0
policy:
  model_name: "Qwen/Qwen2.5-7B"
"""


def _nemo_configs(tmp_path):
    (tmp_path / "parent.yaml").write_text(NEMO_PARENT)
    child = tmp_path / "child.yaml"
    child.write_text(NEMO_CHILD)
    return child


@pytest.mark.parametrize("flavor", [["--flavor", "nemo"], []])
def test_nemo_training_config_with_defaults_and_interpolations(tmp_path, capsys, flavor):
    """The child's keys over its parent's (NeMo's load_config_with_inheritance), ${grpo.use_leave_one_out_baseline}
    read as the merged value (false, the child's), the loop's settings in grpo and loss_fn ignored, and
    reward_scaling applied: rewards [0, 1] become [−1, 1] before the group-mean baseline. Without --flavor the
    same: the file's keys are NeMo's, and the summary says that this is why NeMo's semantics ran."""
    import pyarrow as pa

    child = _nemo_configs(tmp_path)
    src = tmp_path / "in.parquet"
    rewards = [1.0, 0.0, 0.5, 0.25, 1.0, 0.0]
    pq.write_table(pa.table({"prompt_id": ["a", "a", "a", "a", "b", "b"], "reward": rewards,
                             "response_mask": [[1, 1]] * 6}), src)
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", src, "-o", out, *flavor, "--config", child, "--json"], capsys)
    assert code == 0, err
    rep = json.loads(stdout)
    assert rep["flavor"].startswith("nemo")
    if not flavor:
        assert "no --flavor: child.yaml holds nemo's keys" in rep["note"]
    assert rep["settings"]["grpo.adv_estimator.use_leave_one_out_baseline"] is False
    assert rep["settings"]["grpo.reward_scaling.enabled"] is True
    cf = rep["config_file"]
    assert "policy" in cf["ignored_sections"] and "grpo.*" in cf["ignored_keys"] and "loss_fn.*" in cf["ignored_keys"]
    scaled = np.array([-1 + 2 * r for r in rewards])
    want = []
    for i, g in enumerate(["a"] * 4 + ["b"] * 2):
        members = scaled[:4] if g == "a" else scaled[4:]
        want.append((scaled[i] - members.mean()) / (members.std(ddof=1) + 1e-6))
    got = [row[0] for row in pq.read_table(out).column("advantages").to_pylist()]
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)


def test_nemo_training_config_refusals(tmp_path, capsys):
    """A near miss of the flavor's key inside grpo is still a misspelling; a parent that is not there is named;
    reward_shaping's DAPO penalty takes its max from the interpolated policy.max_total_sequence_length; on a
    dump's rewards (advcli.rewards_shaped) it is not applied again."""
    child = _nemo_configs(tmp_path)
    (tmp_path / "parent.yaml").write_text(NEMO_PARENT.replace("    minus_baseline:", "    minus_baselin:"))
    code, _, err = run_main(["explain", "--flavor", "nemo", "--config", child], capsys)
    assert code == 2 and "'grpo.adv_estimator.minus_baselin'" in err and "Traceback" not in err
    (tmp_path / "parent.yaml").unlink()
    code, _, err = run_main(["explain", "--flavor", "nemo", "--config", child], capsys)
    assert code == 2 and "defaults names parent.yaml, which is not a file" in err
    (tmp_path / "parent.yaml").write_text(NEMO_PARENT.replace("    enabled: false\n    overlong_buffer_length",
                                                              "    enabled: true\n    overlong_buffer_length"))
    code, out, err = run_main(["explain", "--flavor", "nemo", "--config", child], capsys)
    assert code == 0 and ("r += min(−(n − (512 − 128))/128·1, 0), n = the mask's first run of ones (the first "
                          "assistant message)") in out, err
    code, out, err = run_main(["explain", "--flavor", "nemo", "--config", child, "--set",
                               "advcli.rewards_shaped=true"], capsys)
    assert code == 0 and "r += min(" not in out, err


def test_a_key_the_file_also_holds_is_no_misspelling(tmp_path):
    """Near misses of keys the file itself holds are settings of their own, not misspellings: verl's generated
    ppo_trainer.yaml has actor_rollout_ref.actor.use_dynamic_bsz beside use_kl_loss (a long shared prefix made
    them look alike), AReaL's tau2 examples an econfig section beside gconfig; an unresolvable interpolation of
    a key the flavor reads is refused naming it."""
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve

    cfg = tmp_path / "ppo_trainer.yaml"
    cfg.write_text("algorithm:\n  adv_estimator: grpo\nactor_rollout_ref:\n  actor:\n    use_kl_loss: false\n"
                   "    use_dynamic_bsz: true\n")
    found: list = []
    resolve("verl", [], str(cfg), found)
    assert "actor_rollout_ref.*" in found[0].ignored_keys
    cfg.write_text("gconfig:\n  n_samples: 4\neconfig:\n  domain: airline\n")
    found = []
    resolve("areal", [], str(cfg), found)
    assert "econfig" in found[0].ignored_sections
    cfg.write_text("econfig:\n  domain: airline\n")  # no gconfig: econfig reads as its misspelling
    with pytest.raises(AdvcliError, match="Did you mean 'gconfig'"):
        resolve("areal", [], str(cfg))
    cfg = tmp_path / "rl.toml"  # prime-rl's rl.toml: [orchestrator] holds the whole orchestrator
    cfg.write_text('[orchestrator]\nbatch_size = 64\ngroup_size = 8\n[orchestrator.algo]\ntype = "grpo"\n')
    found = []
    _, given = resolve("prime-rl", [], str(cfg), found)
    assert given == {"orchestrator.algo.type": "grpo"} and "orchestrator.*" in found[0].ignored_keys
    cfg = tmp_path / "config.yaml"
    cfg.write_text("actor:\n  max_new_tokens: ${gconfig.max_new_tokens}\n")
    with pytest.raises(AdvcliError, match=r"actor.max_new_tokens.*a key the file does not hold"):
        resolve("areal", [], str(cfg))
    _, given = resolve("areal", [("actor.max_new_tokens", 2048)], str(cfg))  # the hint's --set gives it
    assert given["actor.max_new_tokens"] == 2048


def test_without_flavor_the_config_file_says_whose_keys_it_holds(tmp_path, capsys):
    """No --flavor: the flavor reading the most of the file's keys runs, then the one whose trainer sections hold
    the most (a prime-rl rl.toml keeping the advantage defaults: its [orchestrator]); the default flavor where it
    does as well; two others told alike are refused naming both. `explain` resolves it the same way."""
    from advcli.config import load_config_file
    from advcli.errors import AdvcliError
    from advcli.flavors import flavor_of_config

    def of(name, text):
        path = tmp_path / name
        path.write_text(text)
        return flavor_of_config(load_config_file(str(path)), str(path))

    assert of("rl.toml", '[orchestrator]\nbatch_size = 64\ngroup_size = 8\n[model]\nname = "Qwen"\n') == "prime-rl"
    assert of("areal.yaml", "actor:\n  path: Qwen\n  adv_norm:\n    mean_level: group\n") == "areal"
    assert of("canonical.yaml", "estimator:\n  name: rloo\n") == "advcli"
    assert of("ppo_trainer.yaml", PPO_TRAINER_YAML.format(norm_by_std="true")) is None  # verl's: the default
    assert of("data.yaml", "data:\n  train_files: x.parquet\n") is None  # nothing tells
    assert of("mine.yaml", "advcli.estimator: grpo\n") is None  # every flavor's extension key
    with pytest.raises(AdvcliError, match="--flavor openrlhf, --flavor roll and --flavor slime alike") as e:
        of("flat.yaml", "gamma: 0.9\n")  # OpenRLHF's, ROLL's and slime's flat key
    assert "--flavor openrlhf" in e.value.hint
    # SkyRL's trainer section is a mapping; TRL's `trainer` key (grpo or rloo) takes a word: SkyRL's alone
    assert of("skyrl.yaml", "trainer:\n  algorithm:\n    advantage_estimator: rloo\n") == "skyrl"
    assert of("trl.yaml", "trainer: rloo\n") == "trl"
    code, stdout, err = run_main(["explain", "--config", tmp_path / "rl.toml"], capsys)
    assert code == 0 and stdout.startswith("flavor   prime-rl"), err


SKYRL_BASE_YAML = """\
defaults:
  - _self_
  - skyrl_gym_config: default
data:
  train_data: ["${oc.env:HOME}/data/gsm8k/train.parquet"]
trainer:
  placement:
    colocate_all: true
  strategy: fsdp2
  policy:
    model:
      path: "Qwen/Qwen2.5-1.5B-Instruct"
  algorithm:
    advantage_estimator: rloo
    use_kl_in_reward: false
    eps_clip_low: 0.2
    dynamic_sampling:
      type: null
generator:
  backend: vllm
  n_samples_per_prompt: 5
"""


def test_skyrl_whole_config(tmp_path, capsys):
    """SkyRL's ppo_base_config.yaml (NovaSky-AI/SkyRL @ skyrl-v0.1.0, skyrl/train/config/): trainer and generator
    hold the whole trainer besides the flavor's keys, ignored and named; a near miss of a key in
    trainer.algorithm is still a misspelling. Without --flavor the file's keys say SkyRL: rloo, A_i = s_i − the
    mean of the other rows of its group (a group of one 0)."""
    import pyarrow as pa

    cfg = tmp_path / "ppo_base_config.yaml"
    cfg.write_text(SKYRL_BASE_YAML)
    src = tmp_path / "in.parquet"
    rewards = [1.0, 0.0, 0.5, 0.75]
    pq.write_table(pa.table({"prompt_id": ["a", "a", "a", "b"], "reward": rewards,
                             "response_mask": [[1, 1]] * 4}), src)
    for flavor in (["--flavor", "skyrl"], []):
        out = tmp_path / "o.parquet"
        code, stdout, err = run_main(["run", src, "-o", out, *flavor, "--config", cfg, "--json", "--force"], capsys)
        assert code == 0, err
        rep = json.loads(stdout)
        assert rep["flavor"].startswith("skyrl") and rep["estimator"]["name"] == "rloo"
        ignored = set(rep["config_file"]["ignored_keys"])
        assert {"trainer.*", "generator.*", "trainer.algorithm.dynamic_sampling"} <= ignored
        got = [row[0] for row in pq.read_table(out).column("advantages").to_pylist()]
        assert np.allclose(got, [1.0 - 0.25, 0.0 - 0.75, 0.5 - 0.5, 0.0], rtol=1e-6, atol=1e-6)
    import advcli

    result = advcli.run(str(src), str(tmp_path / "lib.parquet"), config=str(cfg), device="cpu")  # the library
    assert result.flavor.startswith("skyrl") and "ppo_base_config.yaml holds skyrl's keys" in result.chosen
    assert pq.read_table(tmp_path / "lib.parquet").column("advantages").equals(pq.read_table(out).column("advantages"))
    cfg.write_text(SKYRL_BASE_YAML.replace("advantage_estimator:", "advantage_estimater:"))
    code, _, err = run_main(["explain", "--flavor", "skyrl", "--config", cfg], capsys)
    assert code == 2 and "'trainer.algorithm.advantage_estimater'" in err and "Traceback" not in err


def test_config_files_merge_and_resolve_as_omegaconf_and_nemo_do(tmp_path):
    """NeMo's load_config_with_inheritance (nemo_rl/utils/config.py @7ea279ab) and OmegaConf: `_override_` replaces
    a top-level section only (deeper, the sections merge and the marker stays a key, which the flavor ignores); a
    child's `???` keeps the parent's value; NeMo's resolvers mul and max compute, nested in each other; `${..x}` is
    a key of the value's parent section; a whole section can be interpolated; an empty table stays a value."""
    from advcli.config import load_config_file

    (tmp_path / "parent.yaml").write_text(
        "grpo:\n  normalize_rewards: false\n  adv_estimator:\n    name: grpo\n    normalize_rewards: false\n"
        "    use_leave_one_out_baseline: false\nloss_fn:\n  reference_policy_kl_penalty: 0.01\n"
        "  reference_policy_kl_type: k3\n")
    child = tmp_path / "child.yaml"
    child.write_text("defaults: parent.yaml\ngrpo:\n  adv_estimator:\n    _override_: true\n    name: gdpo\n"
                     "loss_fn:\n  _override_: true\n  reference_policy_kl_penalty: ???\n")
    flat = load_config_file(str(child))
    assert flat["grpo.adv_estimator.name"] == "gdpo" and flat["grpo.adv_estimator.normalize_rewards"] is False
    assert flat["grpo.adv_estimator._override_"] is True  # merged, not replaced: the marker stays
    assert "loss_fn.reference_policy_kl_type" not in flat  # the top-level section replaced whole
    assert flat["loss_fn.reference_policy_kl_penalty"] == "???"  # nothing under it any more to keep
    child.write_text("defaults: parent.yaml\ngrpo:\n  adv_estimator:\n    normalize_rewards: ???\n")
    assert load_config_file(str(child))["grpo.adv_estimator.normalize_rewards"] is False  # the parent's
    child.write_text("grpo:\n  normalize_rewards: true\n  advantage_clip_high: ${mul:2,1.5}\n"
                     "  advantage_clip_low: ${mul:-1,${grpo.advantage_clip_high}}\n"
                     "  adv_estimator:\n    normalize_rewards: ${..normalize_rewards}\n"
                     "    lam: ${max:0.9,${presets.lam}}\n    text: lam=${presets.lam}\n"
                     "  shape: ${presets.shape}\npresets:\n  lam: 0.95\n  shape:\n    minus_baseline: false\n"
                     "    kl: ${presets.lam}\nenv:\n  home: ${oc.env:HOME}\n  loop: ${env.loop}\n"
                     "length_penalty: {}\n")
    flat = load_config_file(str(child))
    assert flat["grpo.advantage_clip_high"] == 3.0 and flat["grpo.advantage_clip_low"] == -3.0
    assert flat["grpo.adv_estimator.normalize_rewards"] is True
    assert flat["grpo.adv_estimator.lam"] == 0.95 and flat["grpo.adv_estimator.text"] == "lam=0.95"
    assert flat["grpo.shape.minus_baseline"] is False and flat["grpo.shape.kl"] == 0.95  # a section, resolved too
    assert flat["env.home"] == "${oc.env:HOME}" and flat["env.loop"] == "${env.loop}"  # as written
    assert flat["length_penalty"] == {}
    # the command line's overrides come before the interpolations (NeMo's run_grpo.py, Hydra): what interpolates
    # an overridden key follows it; a key the file lacks is not added
    flat = load_config_file(str(child), [("presets.lam", 0.8), ("grpo.normalize_rewards", False), ("new.key", 1)])
    assert flat["grpo.shape.kl"] == 0.8 and flat["grpo.adv_estimator.lam"] == 0.9
    assert flat["grpo.adv_estimator.normalize_rewards"] is False and "new.key" not in flat
    # dotted names (the flat style --set uses) are found by interpolations and overrides alike
    child.write_text("a.b.c: 1\nx: ${a.b.c}\nsec:\n  k.j: 2\n  r: ${sec.k.j}\n")
    assert load_config_file(str(child)) == {"a.b.c": 1, "x": 1, "sec.k.j": 2, "sec.r": 2}
    assert load_config_file(str(child), [("a.b.c", 5), ("sec.k.j", 7)]) == {"a.b.c": 5, "x": 5, "sec.k.j": 7,
                                                                            "sec.r": 7}


def test_set_reaches_the_keys_that_interpolate_it(tmp_path):
    """NeMo's ppo config interpolating gae_lambda_value from gae_lambda: --set gae_lambda=0.8 moves both, as NeMo's
    command-line override does (the returns' λ too, not only the advantages')."""
    from advcli.flavors import resolve

    cfg = tmp_path / "ppo.yaml"
    cfg.write_text("ppo:\n  adv_estimator:\n    name: gae\n    gae_lambda: 0.95\n"
                   "    gae_lambda_value: ${ppo.adv_estimator.gae_lambda}\n")
    out, given = resolve("nemo", [("ppo.adv_estimator.gae_lambda", 0.8)], str(cfg))
    assert given["ppo.adv_estimator.gae_lambda"] == 0.8 and given["ppo.adv_estimator.gae_lambda_value"] == 0.8
    assert out["estimator"]["lam"] == 0.8 and out["estimator"]["returns_lam"] == 0.8


def test_a_nemo_ppo_config_without_its_estimator_runs_ppo_defaults(tmp_path):
    """NeMo's PPOConfig defaults adv_estimator to gae (λ 0.95, γ 1, normalised; ppo.py L197-207 @7ea279ab): a PPO
    config naming none is PPO's gae, not the GRPO loop advcli runs when ppo.adv_estimator.name is unset."""
    from advcli.flavors import resolve

    cfg = tmp_path / "ppo.yaml"
    cfg.write_text("ppo:\n  num_prompts_per_step: 8\n  ppo_epochs: 2\nloss_fn:\n  reference_policy_kl_penalty: 0.0\n")
    out, _ = resolve("nemo", [], str(cfg))
    assert out["estimator"]["name"] == "gae" and out["estimator"]["lam"] == 0.95 and out["estimator"]["gamma"] == 1.0
    cfg.write_text("grpo:\n  num_prompts_per_step: 8\n")  # a GRPO config: the GRPO loop
    out, _ = resolve("nemo", [], str(cfg))
    assert out["estimator"]["name"] == "grpo_loo"


def test_roll_group_size_is_num_return_sequences_in_group(tmp_path):
    """ROLL's RLVRConfig.__post_init__ overwrites actor_infer.generating_args.num_return_sequences with
    num_return_sequences_in_group (roll/pipeline/rlvr/rlvr_config.py L163 @8eb27cc2): the latter wins in a file
    giving both; actor_infer's alone is the group size, as --set takes it; --set still wins over the file."""
    from advcli.flavors import resolve

    cfg = tmp_path / "rlvr.yaml"
    n_key = "actor_infer.generating_args.num_return_sequences"
    cfg.write_text("adv_estimator: grpo\nnum_return_sequences_in_group: 8\n"
                   "actor_infer:\n  generating_args:\n    num_return_sequences: 4\n")
    assert resolve("roll", [], str(cfg))[1][n_key] == 8
    assert resolve("roll", [(n_key, 4)], str(cfg))[1][n_key] == 4
    cfg.write_text("adv_estimator: grpo\nactor_infer:\n  generating_args:\n    num_return_sequences: 8\n")
    assert resolve("roll", [], str(cfg))[1][n_key] == 8
    cfg.write_text("adv_estimator: grpo\nnum_return_sequences_in_group: 4\n")
    assert resolve("roll", [], str(cfg))[1][n_key] == 4


def test_prime_rl_and_roll_config_semantics(tmp_path):
    """prime-rl: `length_penalty = {}` is LinearLengthPenaltyConfig() (configs/algorithm.py L95-107 @559b4477), the
    penalty on with its default weights; an env source with an algorithm of its own is refused (advcli runs one
    over the input); an rl.toml's empty [trainer] table is no setting of TRL's `trainer` key. ROLL: an agentic
    pipeline's config (its env managers) is refused, not run through the RLVR chain."""
    from advcli.config import load_config_file
    from advcli.errors import AdvcliError
    from advcli.flavors import flavor_of_config, resolve

    cfg = tmp_path / "rl.toml"
    cfg.write_text('[orchestrator]\ngroup_size = 8\n[orchestrator.algo]\ntype = "grpo"\n'
                   "[orchestrator.algo.length_penalty]\n[trainer]\n")
    out, given = resolve("prime-rl", [], str(cfg))
    assert given["orchestrator.algo.length_penalty.type"] == "linear"
    assert out["estimator"]["length_penalty"] == [0.25, 0.1, 0.1]
    assert flavor_of_config(load_config_file(str(cfg)), str(cfg)) == "prime-rl"
    cfg.write_text('[orchestrator.algo]\ntype = "grpo"\n[[orchestrator.train.source]]\nname = "a"\n'
                   '[[orchestrator.train.source]]\nname = "b"\n[orchestrator.train.source.algo]\ntype = "opd"\n')
    with pytest.raises(AdvcliError, match="orchestrator.train.source b has an algorithm of its own"):
        resolve("prime-rl", [], str(cfg))
    cfg = tmp_path / "agentic.yaml"
    cfg.write_text("adv_estimator: grpo\ntrain_env_manager:\n  num_env_groups: 8\n  group_size: 8\n")
    with pytest.raises(AdvcliError, match="train_env_manager make it a config of ROLL's agentic pipeline"):
        resolve("roll", [], str(cfg))


def test_areal_empty_norm_section_is_normconfig_defaults(tmp_path):
    """AReaL's `adv_norm: {}` is NormConfig() (to_structured_cfg, areal/api/cli_args.py L3534-3541 @cbff54d6), a
    truthy section: PPOActor normalises (ppo/actor.py L79-81) with the batch mean and std, as if mean_level=batch
    were given; the same for reward_norm."""
    from advcli.flavors import resolve

    cfg = tmp_path / "config.yaml"
    cfg.write_text("actor:\n  kl_ctl: 0.0\n  adv_norm: {}\n  reward_norm: {}\n")
    got, _ = resolve("areal", [], str(cfg))
    want, _ = resolve("areal", [("actor.kl_ctl", 0.0), ("actor.adv_norm.mean_level", "batch"),
                                ("actor.reward_norm.mean_level", "batch")])
    assert got == want and got["estimator"]["norm"] is not None and got["reward"]["norm"] is not None


def test_an_unquoted_yaml_off_is_said_to_be_read_as_a_boolean(tmp_path):
    """YAML 1.1 reads `advcli.id_check: off` as false: the refusal says so (not only "unknown value 'False'");
    the quoted value is the one refused for what it is."""
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve

    cfg = tmp_path / "c.yaml"
    cfg.write_text("advcli.id_check: off\n")
    with pytest.raises(AdvcliError, match="reads an unquoted on/off/yes/no as true/false: quote the value") as e:
        resolve("verl", [], str(cfg))
    assert "Valid: flavor, strict, warn" in e.value.message
    cfg.write_text("advcli.id_check: 'off'\n")
    with pytest.raises(AdvcliError, match="unknown value 'off'") as e:
        resolve("verl", [], str(cfg))
    assert "quote the value" not in e.value.message and e.value.message.startswith(f"config file {cfg}: ")


def test_nested_values_put_a_mapping_setting_back_together():
    """The loader flattens every table: a key below one of the flavor's keys (the longest) goes back into that key's
    mapping, one more than a level under an open prefix into the parameter's; a key that is a setting of its own
    stays one, whatever stands above it."""
    from advcli.flavors import _nested_values

    known = {"a.b": None, "a.b.c": None, "reward.norm": None, "reward.norm.x": None}
    got = _nested_values({"a.b.c": 1, "a.b.d": 2, "reward.norm.mean_level": "group", "reward.norm.x": 3,
                          "estimator.norm.eps": 1e-5, "estimator.name": "areal_gae", "other.key": 4},
                         known, ("estimator.",))
    assert got == {"a.b.c": 1, "a.b": {"d": 2}, "reward.norm": {"mean_level": "group"}, "reward.norm.x": 3,
                   "estimator.norm": {"eps": 1e-5}, "estimator.name": "areal_gae", "other.key": 4}


def test_a_key_given_twice_in_a_yaml_config_is_refused_as_omegaconf_refuses_it(tmp_path, capsys):
    """PyYAML keeps the last of two equal keys silently; OmegaConf, which verl, NeMo RL, ROLL and AReaL load their
    configs with, refuses the file ("found duplicate key"), so the trainer would not have run it. YAML merge keys
    (`<<: *anchor`) are still read, their keys overridable."""
    dup = tmp_path / "dup.yaml"
    dup.write_text("algorithm:\n  adv_estimator: grpo\n  adv_estimator: gae\n")
    code, _, err = run_main(["explain", "--flavor", "verl", "--config", dup], capsys)
    assert code == 2 and "line 3" in err and "duplicate key 'adv_estimator'" in err, err
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &b {adv_estimator: grpo, gamma: 0.9}\nalgorithm:\n  <<: *b\n  gamma: 1.0\n")
    code, out, err = run_main(["explain", "--flavor", "verl", "--config", merged], capsys)
    assert code == 0, err

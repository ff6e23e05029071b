"""OpenRLHF's releases before 0.7.1 (`--flavor openrlhf@X`, X from 0.3.6.post1 to 0.7.0.post1), with numbers worked
out here from the code of that release, read at the tag (OpenRLHF/OpenRLHF):

- the replay buffer's normalize (openrlhf/trainer/ppo_utils/replay_buffer.py @v0.7.0 L209-237, @v0.6.4 L215-246):
  the items' advantages concatenated, μ = Σ (every position held) / Σ action_mask, var = Σ (A − μ)²·m / Σ m,
  rstd = max(var, 1e-8)^-½, A ← (A − μ)·rstd at every position held. Before 0.7.0 ``remove_padding_in_sequences``
  (@v0.6.4 L120-155) cuts ``(1 − action_mask).sum()`` positions off each row's end before the buffer holds it, so
  a row keeps its first Σm positions (the others are not trained on: written 0); 0.7.0 keeps every position;
- the cumulative return of the masked rewards (get_cumulative_returns: holes carry the next token's return);
  γ forced to 1 for the group estimators only from 0.6.3 (experience_maker.py @v0.6.3), reinforce always
  discounts;
- compute_approx_kl multiplies the log-ratio by the action mask before 0.7.0 (models/utils.py @v0.6.4 L25-44).

The buffer's arithmetic is written out below (:func:`buffer_normalize`) as the release's code does it, on
padded Python lists, independently of advcli's exact moment sums; the expected values of a small case are
also given by hand.
"""
from __future__ import annotations

import math

import pytest
from _released import advcli_run
from conftest import run_main

from advcli.flavors import get, release_of

# a hole inside row 0 (mask 1 0 1 0), trailing padding in row 1, a full row 2
MASKS = [[1, 0, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
REWARDS = [1.0, 0.5, -1.0]


def rows(masks=MASKS, rewards=REWARDS, ref=-1.0) -> list[dict]:
    return [dict(prompt_id=f"p{i}", reward=r, mask=m, old=[-1.0] * len(m), ref=[ref] * len(m),
                 values=[0.0] * len(m)) for i, (m, r) in enumerate(zip(masks, rewards))]


def cumulative_returns(mask: list[int], reward: float, gamma: float) -> list[float]:
    """get_cumulative_returns of compute_reward's output with β = 0: r at the last mask=1 token, × mask, then
    G_t = R_t + γ·G_{t+1} over every position."""
    last = max(t for t, m in enumerate(mask) if m)
    R = [reward if t == last else 0.0 for t in range(len(mask))]
    out, g = [0.0] * len(mask), 0.0
    for t in reversed(range(len(mask))):
        g = R[t] * mask[t] + gamma * g
        out[t] = g
    return out


def buffer_normalize(adv: list[list[float]], masks: list[list[int]], trim: bool) -> list[list[float]]:
    """ReplayBuffer.normalize as the release's code runs it: ``trim`` (before 0.7.0) cuts each row to
    ``[:-right_pad]`` with right_pad = Σ(1 − m) first; the cut positions are written 0 here."""
    held = []
    for a, m in zip(adv, masks):
        right_pad = sum(1 - x for x in m)
        keep = len(m) - right_pad if (trim and right_pad) else len(m)
        held.append((a[:keep], m[:keep]))
    items = [x for a, _ in held for x in a]
    mvec = [x for _, m in held for x in m]
    num_actions = sum(mvec)
    mean = sum(items) / num_actions
    var = sum((x - mean) ** 2 * w for x, w in zip(items, mvec)) / num_actions
    rstd = 1.0 / math.sqrt(max(var, 1e-8))
    out = []
    for (a, _), m in zip(held, masks):
        out.append([(x - mean) * rstd for x in a] + [0.0] * (len(m) - len(a)))
    return out


def masked_whiten(adv: list[list[float]], masks: list[list[int]]) -> list[list[float]]:
    """0.7.1 on (experience_maker.py @v0.7.1 L505-526): μ = Σ A·m / Σ m, the same variance, every position."""
    n = sum(sum(m) for m in masks)
    mean = sum(x * w for a, m in zip(adv, masks) for x, w in zip(a, m)) / n
    var = sum((x - mean) ** 2 * w for a, m in zip(adv, masks) for x, w in zip(a, m)) / n
    rstd = 1.0 / math.sqrt(max(var, 1e-8))
    return [[(x - mean) * rstd for x in a] for a in adv]


def check(got, want, what):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=1e-5, abs=1e-6), f"{what} row {i}: {g} != {w}"


RAW = [cumulative_returns(m, r, 1.0) for m, r in zip(MASKS, REWARDS)]  # [1,1,1,0], [.5,.5,0,0], [-1]*4


def test_the_buffers_whitening_by_hand():
    """The formula's numbers for the rows above, worked out by hand. Before 0.7.0 the buffer holds [1, 1] (mask 1 0),
    [.5, .5] and [-1]*4: μ = −1/7 over Σm = 7, var = ((8/7)² + 2·(9/14)² + 4·(6/7)²)/7; 0.7.0 holds every position:
    μ = (3 + 1 − 4)/8 = 0, var = (1 + 1 + .25 + .25 + 4)/8 = 0.8125 (the hole's A = 1 is in the sum, not the count)."""
    mu = -1 / 7
    r = 1 / math.sqrt(((8 / 7) ** 2 + 2 * (9 / 14) ** 2 + 4 * (6 / 7) ** 2) / 7)
    check(buffer_normalize(RAW, MASKS, trim=True),
          [[(1 - mu) * r] * 2 + [0.0, 0.0], [(0.5 - mu) * r] * 2 + [0.0, 0.0], [(-1 - mu) * r] * 4], "by hand <0.7.0")
    r0 = 1 / math.sqrt(0.8125)
    check(buffer_normalize(RAW, MASKS, trim=False),
          [[r0, r0, r0, 0.0], [0.5 * r0, 0.5 * r0, 0.0, 0.0], [-r0] * 4], "by hand 0.7.0")


@pytest.mark.parametrize("spec,trim", [("openrlhf@0.3.6.post1", True), ("openrlhf@0.4.5", True),
                                       ("openrlhf@0.5.2", True), ("openrlhf@0.6.4", True), ("openrlhf@0.7.0", False),
                                       ("openrlhf@0.7.0.post1", False)])
@pytest.mark.parametrize("chunk", [None, "1"])
def test_replay_buffer_whitening(tmp_path, spec, trim, chunk):
    """reinforce (gae with V = 0 and λ = 1 for releases before 0.5.1, whose --lambd defaults to 0.95: the same
    returns at γ = λ = 1), β = 0: the buffer's normalize over the step, at one chunk and at one row per chunk (the
    sums merged across chunks)."""
    est = "gae" if spec in ("openrlhf@0.3.6.post1", "openrlhf@0.4.5") else "reinforce"
    extra = ["--chunk-rows", chunk] if chunk else []
    settings = {"advantage_estimator": est, "init_kl_coef": 0, **({"lambd": 1.0} if est == "gae" else {})}
    got = advcli_run(tmp_path, rows(), spec, settings, extra)["advantages"]
    check(got, buffer_normalize(RAW, MASKS, trim), spec)


def test_from_0_7_1_the_mean_is_masked(tmp_path):
    got = advcli_run(tmp_path, rows(), "openrlhf@0.7.1", {"advantage_estimator": "reinforce", "init_kl_coef": 0})
    check(got["advantages"], masked_whiten(RAW, MASKS), "0.7.1")


def test_contiguous_masks_give_the_masked_whitening_with_zeros_beyond(tmp_path):
    """Masks that are 1s then 0s (what these releases generate): every release's mean and variance are the masked
    ones; before 0.7.0 the padding is written 0, from 0.7.0 it is (0 − μ)·rstd."""
    masks, rewards = [[1, 1, 0], [1, 1, 1], [1, 0, 0]], [1.0, 0.0, 0.25]
    raw = [cumulative_returns(m, r, 1.0) for m, r in zip(masks, rewards)]
    settings = {"advantage_estimator": "reinforce", "init_kl_coef": 0}
    whitened = masked_whiten(raw, masks)
    old = advcli_run(tmp_path, rows(masks, rewards), "openrlhf@0.6.0", settings)["advantages"]
    check(old, [[x * w for x, w in zip(a, m)] for a, m in zip(whitened, masks)], "0.6.0")
    new = advcli_run(tmp_path, rows(masks, rewards), "openrlhf@0.7.0", settings)["advantages"]
    check(new, whitened, "0.7.0")


GROUP_REWARDS = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]


def group_rows() -> list[dict]:
    return [dict(prompt_id=f"p{i // 4}", reward=r, mask=[1, 1, 1], old=[-1.0] * 3, ref=[-1.0] * 3,
                 values=[0.0] * 3) for i, r in enumerate(GROUP_REWARDS)]


def test_rloo_discounts_before_0_6_3(tmp_path):
    """rloo with gamma 0.5: before 0.6.3 the shaped reward s (at the last token) gives returns [s/4, s/2, s], then
    the buffer whitens; from 0.6.3 γ is forced to 1: [s, s, s] and every row's tokens are equal."""
    s = [r - (sum(GROUP_REWARDS[4 * (i // 4):4 * (i // 4) + 4]) - r) / 3 for i, r in enumerate(GROUP_REWARDS)]
    settings = {"advantage_estimator": "rloo", "n_samples_per_prompt": 4, "init_kl_coef": 0, "gamma": 0.5}
    masks = [[1, 1, 1]] * 8
    for spec, gamma in (("openrlhf@0.5.3", 0.5), ("openrlhf@0.6.2", 0.5), ("openrlhf@0.6.3", 1.0)):
        raw = [[x * gamma ** (2 - t) for t in range(3)] for x in s]
        got = advcli_run(tmp_path, group_rows(), spec, settings)["advantages"]
        check(got, buffer_normalize(raw, masks, trim=True), spec)


def test_group_norm_and_dr_grpo_are_not_whitened(tmp_path):
    """0.6.0: group_norm (r − mean)/(unbiased std + 1e-9) left out of the buffer's whitening (ppo_trainer.py
    @v0.6.0 L242-243); 0.6.3.post2: dr_grpo, r − mean, left out too, and run at n = 1 (every shaped reward 0)."""
    gn = []
    for g in (GROUP_REWARDS[:4], GROUP_REWARDS[4:]):
        mean = sum(g) / 4
        std = math.sqrt(sum((x - mean) ** 2 for x in g) / 3)
        gn += [(x - mean) / (std + 1e-9) for x in g]
    got = advcli_run(tmp_path, group_rows(), "openrlhf@0.6.0",
                     {"advantage_estimator": "group_norm", "n_samples_per_prompt": 4, "init_kl_coef": 0})
    check(got["advantages"], [[x] * 3 for x in gn], "0.6.0 group_norm")
    got = advcli_run(tmp_path, group_rows(), "openrlhf@0.6.3.post2",
                     {"advantage_estimator": "dr_grpo", "n_samples_per_prompt": 4, "init_kl_coef": 0})
    dr = [r - sum(GROUP_REWARDS[4 * (i // 4):4 * (i // 4) + 4]) / 4 for i, r in enumerate(GROUP_REWARDS)]
    check(got["advantages"], [[x] * 3 for x in dr], "0.6.3.post2 dr_grpo")
    single = [dict(r, prompt_id=f"q{i}") for i, r in enumerate(group_rows())]  # one sample per prompt
    got = advcli_run(tmp_path, single, "openrlhf@0.6.4",
                     {"advantage_estimator": "dr_grpo", "n_samples_per_prompt": 1, "init_kl_coef": 0})
    check(got["advantages"], [[0.0] * 3] * 8, "0.6.4 dr_grpo n=1")


def test_the_kl_is_masked_before_0_7_0(tmp_path):
    """k1 with β = 0.1 and lp − ref = 0.2 at every token: the token reward at a mask=0 position is 0 before 0.7.0
    (compute_approx_kl masks the log-ratio) and −0.02 from 0.7.0; the returns mask the rewards either way."""
    settings = {"advantage_estimator": "reinforce", "init_kl_coef": 0.1}
    r = [dict(prompt_id="p0", reward=1.0, mask=[1, 0, 1, 0], old=[-1.0] * 4, ref=[-1.2] * 4, values=[0.0] * 4)]
    old = advcli_run(tmp_path, r, "openrlhf@0.6.4", settings)["token_level_rewards"][0]
    new = advcli_run(tmp_path, r, "openrlhf@0.7.0", settings)["token_level_rewards"][0]
    assert old == pytest.approx([-0.02, 0.0, 0.98, 0.0], abs=1e-6)
    assert new == pytest.approx([-0.02, -0.02, 0.98, -0.02], abs=1e-6)


def test_every_release_before_0_7_1_maps_to_its_class():
    o = get("openrlhf")
    want = {"0.3.6.post1": "0.3.6.post1", "0.3.8": "0.3.6.post1", "0.4.2.post1": "0.3.6.post1",
            "0.4.5": "0.3.6.post1", "0.4.6": "0.4.6", "0.5.0": "0.4.6", "0.5.1": "0.5.1", "0.5.2.post1": "0.5.1",
            "0.5.3": "0.5.3", "0.5.6": "0.5.3", "0.5.7": "0.5.7", "0.5.9.post1": "0.5.7", "0.6.0": "0.6.0",
            "0.6.0.post1": "0.6.0.post1",
            "0.6.2": "0.6.0.post1", "0.6.3": "0.6.3",
            "0.6.3.post1": "0.6.3", "0.6.3.post2": "0.6.3.post2", "0.6.4": "0.6.4", "0.7.0": "0.7.0",
            "0.7.0.post1": "0.7.0", "v0.5.8": "0.5.7"}
    for v, name in want.items():
        assert release_of(o, v).name == name, v


@pytest.mark.parametrize("argv,says", [
    (["--flavor", "openrlhf@0.5.0", "--set", "advantage_estimator=reinforce"], "PPO with GAE only"),
    (["--flavor", "openrlhf@0.5.9", "--set", "advantage_estimator=group_norm", "--set", "n_samples_per_prompt=2"],
     "gae, reinforce, rloo only"),
    (["--flavor", "openrlhf@0.6.3", "--set", "advantage_estimator=dr_grpo", "--set", "n_samples_per_prompt=2"],
     "has gae, reinforce, rloo, reinforce_baseline, group_norm only"),
    (["--flavor", "openrlhf@0.4.5", "--set", "kl_estimator=k3"], "k1 only"),
    (["--flavor", "openrlhf@0.6.2", "--set", "no_advantage_std_norm=true"], "came with 0.6.4"),
    (["--flavor", "openrlhf@0.4.0", "--set", "reward_clip_range=[-5,5]"], "--reward_clip_range came with 0.4.6"),
    (["--flavor", "openrlhf@0.6.0", "--set", "kl_estimator=k2"], "k1 or k3 only"),
    (["--flavor", "openrlhf@0.5.8", "--set", "use_kl_loss=true"], "came with 0.6.0"),
    (["--flavor", "openrlhf@0.7.0", "--set", "enable_vllm_is_correction=true"], "came with 0.8.9"),
])
def test_what_an_old_release_lacks_is_refused(capsys, argv, says):
    code, out, err = run_main(["explain", *argv], capsys)
    assert code == 2, out + err
    assert says in out + err


@pytest.mark.parametrize("release,lam", [("0.3.6.post1", 0.95), ("0.4.2", 0.95), ("0.5.0", 0.95), ("0.5.6", 0.95),
                                         ("0.5.7", 1.0), ("0.5.9.post1", 1.0), ("0.6.1", 0.95), ("0.6.3.post2", 0.95),
                                         ("0.6.4", 1.0), ("0.7.1", 1.0), (None, 1.0)])
def test_gae_lambda_defaults_to_each_releases_lambd(tmp_path, release, lam):
    """--lambd's default at each release (cli/train_ppo_ray.py: 0.95 at L247 @v0.3.6.post1 ... L269 @v0.5.6, 1.0 at
    L272 @v0.5.7, 0.95 again at L300 @v0.6.0 ... L314 @v0.6.3.post2, 1 from L317 @v0.6.4): gae with λ left unset
    gives the numbers of λ set to that value by hand, and --set still wins."""
    from advcli.flavors import resolve

    spec = "openrlhf" if release is None else f"openrlhf@{release}"
    base = [("algo.advantage.estimator", "gae")]
    assert resolve(spec, base)[0]["estimator"]["lam"] == lam
    assert resolve(spec, [*base, ("algo.advantage.lambd", 0.5)])[0]["estimator"]["lam"] == 0.5

"""TRL's released package (0.9.2-0.21.0) against `advcli run --flavor trl@X --set trainer=rloo`: the old online
RLOOTrainer's advantages, from the installed release's own statements. ``RLOOTrainer.train``
(``trl/trainer/rloo_trainer.py``) computes them inline, so the block from ``contain_eos_token`` (the missing-EOS
penalty) to ``advantages.flatten()`` and the optional ``normalize_advantage`` is compiled from the file and run on
a batch laid out as the trainer lays it out (its prompts repeated rloo_k times), with right-padded responses,
per-token logprobs, an EOS token on some rows and not on others. Skipped where the installed TRL has no such
trainer (before 0.9.2, or 0.22.0 and newer, whose RLOOTrainer tests/conformance/test_conformance_trl.py checks)."""
from __future__ import annotations

import ast
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _released import advcli_run, installed_release_args, package_file, require

VERSION = require("trl")
try:
    PATH = package_file("trl.trainer.rloo_trainer")
except AssertionError:
    PATH = None
SOURCE = open(PATH, encoding="utf-8").read() if PATH else ""
if "rloo_k" not in SOURCE:
    pytest.skip(f"trl {VERSION} has no old online RLOOTrainer (0.9.2-0.21.0)", allow_module_level=True)
AT_RELEASE = installed_release_args("trl", VERSION)
CODE = next((a.split("=", 1)[1] for a in AT_RELEASE if a.startswith("advcli.trl_code=")), "")
SINCE14 = CODE not in ("0.9.2", "0.11.0")
EOS, PAD, TOKEN = 2, 0, 5


def _block():
    """The release's statements from ``contain_eos_token = ...`` to ``advantages = advantages.flatten()`` and the
    ``if args.normalize_advantage`` after it, wherever they sit in ``RLOOTrainer.train``."""
    tree = ast.parse(SOURCE, PATH)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RLOOTrainer")
    train = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    for node in ast.walk(train):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        start = next((i for i, st in enumerate(body) if isinstance(st, ast.Assign)
                      and ast.unparse(st.targets[0]) == "contain_eos_token"), None)
        if start is None:
            continue
        stop = next(i for i in range(start, len(body)) if isinstance(body[i], ast.Assign)
                    and ast.unparse(body[i]) == "advantages = advantages.flatten()") + 1
        after = body[stop] if stop < len(body) else None
        if isinstance(after, ast.If) and "normalize_advantage" in ast.unparse(after.test):
            stop += 1
        return compile(ast.Module(body=body[start:stop], type_ignores=[]), PATH, "exec")
    raise AssertionError(f"{PATH}: no advantage block in RLOOTrainer.train")


BLOCK = _block()
INVALID = float(next(ast.literal_eval(n.value) for n in ast.parse(SOURCE).body if isinstance(n, ast.Assign)
                     and ast.unparse(n.targets[0]) == "INVALID_LOGPROB"))


def batch(seed: int, k: int, prompts: int = 3, width: int = 6):
    """rloo_k copies of ``prompts`` prompts (row r answers prompt r mod prompts); lengths 1..width, EOS on the
    last token of about two rows in three."""
    rng = np.random.default_rng(seed)
    n = k * prompts
    lengths = rng.integers(1, width + 1, n)
    eos = rng.random(n) < 0.65
    responses = torch.full((n, width), PAD, dtype=torch.long)
    for i, length in enumerate(lengths):
        responses[i, :length] = TOKEN
        if eos[i]:
            responses[i, length - 1] = EOS
    logprobs = torch.tensor(rng.normal(-1.0, 0.5, (n, width)), dtype=torch.float32)
    ref = torch.tensor(rng.normal(-1.0, 0.5, (n, width)), dtype=torch.float32)
    scores = torch.tensor(rng.normal(0.0, 2.0, n), dtype=torch.float32)
    rows = [dict(prompt_id=f"p{i % prompts}", reward=float(scores[i]), mask=[1] * int(lengths[i]),
                 old=logprobs[i, :lengths[i]].tolist(), ref=ref[i, :lengths[i]].tolist(),
                 extra={"truncated": 0.0 if eos[i] else 1.0}) for i in range(n)]
    return rows, responses, torch.tensor(lengths - 1), logprobs, ref, scores


def release_advantages(data, **config) -> list[float]:
    rows, responses, seq_lengths, logprobs, ref, scores = data
    args = SimpleNamespace(**config)
    tok = SimpleNamespace(eos_token_id=EOS, pad_token_id=PAD)
    ns = {"torch": torch, "args": args, "self": SimpleNamespace(args=args), "tokenizer": tok,
          "processing_class": tok, "postprocessed_responses": responses, "responses": responses,
          "sequence_lengths": seq_lengths, "logprobs": logprobs.clone(), "ref_logprobs": ref.clone(),
          "scores": scores.clone(), "INVALID_LOGPROB": INVALID, "empty_cache": lambda: None}
    exec(BLOCK, ns)
    return ns["advantages"].tolist()


CASES = [({}, {}), ({"kl_coef": 0.2}, {"kl_coef": 0.2})]
if CODE == "0.9.2":
    CASES.append(({"non_eos_penalty": True, "penalty_reward_value": -2},
                  {"non_eos_penalty": "true", "penalty_reward_value": -2}))
else:
    CASES.append(({"missing_eos_penalty": 1.5}, {"missing_eos_penalty": 1.5}))
if SINCE14:
    CASES += [({"normalize_reward": True, "reward_clip_range": 0.8, "normalize_advantage": True},
               {"normalize_reward": "true", "reward_clip_range": 0.8, "normalize_advantage": "true"}),
              ({"token_level_kl": True, "normalize_reward": True},
               {"token_level_kl": "true", "normalize_reward": "true"})]


@pytest.mark.parametrize("seed", (0, 1))
@pytest.mark.parametrize("k", (2, 4))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_old_rloo_matches_release(tmp_path, seed, k, case):
    theirs, ours = CASES[case]
    config = dict(kl_coef=0.05, rloo_k=k, non_eos_penalty=False, penalty_reward_value=-1, missing_eos_penalty=None,
                  normalize_reward=False, reward_clip_range=10.0, normalize_advantage=False, token_level_kl=False,
                  stop_token_id=EOS)
    config.update(theirs)
    data = batch(seed, k)
    expected = release_advantages(data, **config)
    out = advcli_run(tmp_path, data[0], "trl", {"trainer": "rloo", "rloo_k": k, **ours}, extra=AT_RELEASE)
    got = [row[0] for row in out["advantages"]]
    assert got == pytest.approx(expected, rel=1e-5, abs=3e-5), f"trl {VERSION} old RLOO {theirs}"

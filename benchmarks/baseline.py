"""The padded-and-looped baseline: what users do today without advcli, written the way the
frameworks do it.

Load the whole dump, pad every token column to ``[rows, max_len]``, then

* ``gae``: verl ``apply_kl_penalty`` (k3 / ``low_var_kl``, fixed β = 0.001) and
  ``compute_gae_advantage_return`` — a Python loop over the token positions, right to left, on
  ``[rows]`` column vectors, then ``masked_whiten`` (verl/trainer/ppo/core_algos.py L216-263,
  ray_trainer.py ``apply_kl_penalty`` @1dda039b; γ = λ = 1, verl's defaults);
* ``grpo``: verl ``compute_grpo_outcome_advantage`` — Python loops over the rows into a dict of
  scores per prompt id, ``torch.mean``/``torch.std`` per group, a loop over the rows to normalise
  (core_algos.py L268-331 @1dda039b);

and unpad the results into list columns and write the dump back with them.

Three variants of the loading and writing around those loops:

* default — pyarrow without tuning: ``pq.read_table``, pad the columns the estimator reads with
  ``torch.nn.utils.rnn.pad_sequence`` over one tensor per row (what the frameworks' collate
  functions do), unpad row by row, write with pyarrow's default writer settings
  (``pq.write_table``: snappy, dictionary encoding on every column);
* ``--lean`` — the same loops with vectorised numpy padding/unpadding and the floor's tuned writer
  (zstd, dictionary only on id/text columns, byte-stream-split floats): the baseline at its best;
* ``--pandas`` — the route most scripts take: ``pd.read_parquet``, the whole dump padded into one
  batch (every token list column, one ``torch.tensor`` per row + ``pad_sequence``, as a trainer's
  batch holds them), the results put back into the DataFrame row by row, ``df.to_parquet``.

This is benchmark code written after the frameworks' structure, not their code.
``python benchmarks/baseline.py gae|grpo IN OUT [--lean | --pandas]``.
"""
import sys
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from floor import float_columns as _float_cols

LEAN = "--lean" in sys.argv
PANDAS = "--pandas" in sys.argv


def padded(col: pa.ChunkedArray, width: int, dtype) -> torch.Tensor:
    if not LEAN:  # one tensor per row, then pad_sequence (frameworks' collate)
        arr = col.combine_chunks()
        offs = np.asarray(arr.offsets, dtype=np.int64)
        vals = arr.values.to_numpy(zero_copy_only=False)
        rows = [torch.from_numpy(vals[offs[i]:offs[i + 1]].astype(dtype)) for i in range(len(arr))]
        out = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
        return torch.nn.functional.pad(out, (0, width - out.shape[1]))
    arr = col.combine_chunks()
    offs = np.asarray(arr.offsets, dtype=np.int64)
    vals = arr.values.to_numpy(zero_copy_only=False)[offs[0]:offs[-1]]
    offs = offs - offs[0]
    lengths = np.diff(offs)
    out = np.zeros((len(arr), width), dtype=dtype)
    row = np.repeat(np.arange(len(arr)), lengths)
    pos = np.arange(len(vals)) - np.repeat(offs[:-1], lengths)
    out[row, pos] = vals
    return torch.from_numpy(out)


def masked_mean(x, m):
    return (x * m).sum() / m.sum()


def masked_whiten(x, m):
    mean = masked_mean(x, m)
    centered = x - mean
    var = masked_mean(centered ** 2, m)
    var = var * m.sum() / (m.sum() - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)


def gae(batch, reward, index, lengths, width):
    mask, old, ref, values = (batch[c] for c in ("response_mask", "old_log_probs", "ref_log_probs", "values"))
    scores = torch.zeros_like(mask)
    scores[torch.arange(len(lengths)), torch.from_numpy(lengths - 1)] = reward
    kl = torch.clamp(ref - old, -20, 20)  # low_var_kl
    kld = torch.clamp(torch.exp(kl) - kl - 1, -10, 10) * mask
    rewards = scores - 0.001 * kld
    gamma = lam = 1.0
    nextvalues, lastgaelam, rev = 0, 0, []
    for t in reversed(range(width)):
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * mask[:, t] + (1 - mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * mask[:, t] + (1 - mask[:, t]) * lastgaelam
        rev.append(lastgaelam)
    adv = torch.stack(rev[::-1], dim=1)
    ret = adv + values
    return masked_whiten(adv, mask), ret


def grpo(batch, reward, index, lengths, width, eps=1e-6):
    mask = batch["response_mask"]
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(len(lengths)), torch.from_numpy(lengths - 1)] = reward
    scores = rewards.sum(dim=-1)
    id2score, id2mean, id2std = defaultdict(list), {}, {}
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            s = torch.stack(id2score[idx])
            id2mean[idx], id2std[idx] = torch.mean(s), torch.std(s)
    for i in range(scores.shape[0]):
        scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + eps)
    adv = scores.unsqueeze(-1) * mask
    return adv, adv


def unpad(x: torch.Tensor, offsets: pa.Array, lengths: np.ndarray) -> pa.Array:
    if not LEAN:  # row by row
        return pa.array([x[i, :n].numpy() for i, n in enumerate(lengths.tolist())], type=pa.list_(pa.float32()))
    keep = torch.arange(x.shape[1])[None, :] < torch.from_numpy(lengths)[:, None]
    return pa.ListArray.from_arrays(offsets, pa.array(x[keep].numpy()))


READS = {"gae": ("response_mask", "old_log_probs", "ref_log_probs", "values"), "grpo": ("response_mask",)}


def main_pandas(kind: str, src: str, dst: str) -> None:
    import pandas as pd

    df = pd.read_parquet(src)
    list_cols = [c for c in df.columns if df[c].dtype == object and isinstance(df[c].iloc[0], np.ndarray)]
    batch = {c: torch.nn.utils.rnn.pad_sequence([torch.tensor(x, dtype=torch.float32) for x in df[c]],
                                                batch_first=True) for c in list_cols}
    lengths = df["response_mask"].map(len).to_numpy()
    reward = torch.tensor(df["reward"].to_numpy())
    adv, ret = (gae if kind == "gae" else grpo)(batch, reward, df["prompt_id"].to_numpy(), lengths,
                                                 int(lengths.max()))
    df["advantages"] = [adv[i, :n].numpy() for i, n in enumerate(lengths.tolist())]
    df["returns"] = [ret[i, :n].numpy() for i, n in enumerate(lengths.tolist())]
    df.to_parquet(dst)


def main(kind: str, src: str, dst: str) -> None:
    if PANDAS:
        return main_pandas(kind, src, dst)
    table = pq.read_table(src)
    mask = table.column("response_mask").combine_chunks()
    offsets = pa.array(np.asarray(mask.offsets, dtype=np.int32) - mask.offsets[0].as_py())
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    width = int(lengths.max())
    batch = {c: padded(table.column(c), width, np.float32) for c in READS[kind]}
    reward = torch.from_numpy(table.column("reward").to_numpy().copy())
    index = table.column("prompt_id").to_numpy(zero_copy_only=False)
    adv, ret = (gae if kind == "gae" else grpo)(batch, reward, index, lengths, width)
    table = table.append_column("advantages", unpad(adv, offsets, lengths))
    table = table.append_column("returns", unpad(ret, offsets, lengths))
    if not LEAN:
        pq.write_table(table, dst)
        return
    dict_cols = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_binary(f.type)]
    pq.write_table(table, dst, compression="zstd", use_dictionary=dict_cols,
                   use_byte_stream_split=_float_cols(table.schema), write_statistics=False)


if __name__ == "__main__":
    main(*[a for a in sys.argv[1:] if not a.startswith("--")][:3])

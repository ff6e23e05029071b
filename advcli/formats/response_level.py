"""Response-level runs (a dump without token data): configurations that need token data refused before
anything is read, and the outputs' one-token ``advantages``/``returns`` turned into float32 scalars."""
from __future__ import annotations

import json
import os

from ..errors import AdvcliError
from .input_edge import IMPORTED, name_dumps, source_of
from .records import RESERVED
from .registry import a_title


def check_config(inputs: list[str], cfg: dict, kl_off: str | None = None) -> None:
    """Refuse, before anything is read, a configuration that needs token data the imported dump lacks (``kl_off``:
    the flavor's setting that takes the KL out of the reward, :attr:`advcli.flavors.Flavor.kl_off`, for the hint)."""
    refused = refusal(inputs, cfg, kl_off)
    if refused:
        raise refused[1]


def implied_settings(inputs: list[str], cfg: dict) -> dict[str, object]:
    """Canonical settings the imported dump implies for this configuration (applied while resolving it):
    an estimator the dump's sessions call for runs on their last rows (``grouping.trajectories=last_step``:
    verl's GRPO on multi-output agent loops, each output getting its session's advantage)."""
    from ..config.runspec import RunSpec

    name = RunSpec.from_config(cfg).estimator.name
    for p in inputs:
        if p in IMPORTED and IMPORTED[p].level == "response" and name in IMPORTED[p].last_step_estimators:
            # verl's v1 sessions (the only format that has them) take the final output's value at its first
            # valid token: 0 for a session whose final output has none (stepwise.last_step, first_valid)
            return {"grouping.trajectories": "last_step", "grouping.trajectory_copy": "first_valid"}
    return {}


def refusal(inputs: list[str], cfg: dict, kl_off: str | None = None) -> tuple[str, AdvcliError] | None:
    """Why ``run`` refuses this configuration on these inputs (a response-level dump lacking what it
    needs): (the short reason, the error ``run`` raises), or None when it does not. ``advcli inspect``
    asks this for every estimator; torch is never imported here (the estimator registry is torch-free)."""
    infos = [IMPORTED[p] for p in inputs if p in IMPORTED and IMPORTED[p].level == "response"]
    if not infos:
        return None
    info = infos[0]
    from ..config.runspec import RunSpec
    from ..estimators import get as get_estimator

    run = RunSpec.from_config(cfg)
    name = run.estimator.name
    spec = get_estimator(name)  # an unknown name: the registry's own message
    missing = None
    hint = "response-level estimators work: GRPO, RLOO, Dr.GRPO, GPG, ... (`advcli inspect DUMP` lists them)"
    weighs_by_tokens = spec.weighs_by_tokens(run) if spec.weighs_by_tokens else ""
    if spec.level == "token" and not (spec.response_level_ok and spec.response_level_ok(run)):
        needs = ["response_mask", *spec.needs]
        missing = f"estimator {name} works on token data ({', '.join(needs)})"
    elif spec.needs_lengths and not all(i.token_lengths or i.lengths_known for i in infos):
        # (a dump whose rows give their token counts gets a mask of that many tokens: OPO weighs by them)
        missing = f"estimator {name} needs {spec.needs_lengths}"
    elif weighs_by_tokens and not all(i.lengths_known for i in infos):  # (run makes the mask of them)
        missing = f"{weighs_by_tokens}, and so needs every response's token count"
    elif run.kl.in_reward and run.kl.coef != 0:
        missing = "KL in the reward needs the policy and reference log-probs per token (old_log_probs, ref_log_probs)"
        hint = (f"the same estimator runs without the KL in the reward ({kl_off})" if kl_off else
                "the same estimator runs with the KL coefficient at 0 (`advcli explain --flavor NAME --keys` names "
                "the flavor's KL keys)")
    elif run.reward.overlong.tokens is not None and run.reward.source != "token_level_scores":
        missing = "the overlong penalty needs each response's token count"
        hint = ("a dump's rewards already hold the trainer's own penalty (advcli.rewards_shaped, set for it); "
                "leave the penalty's keys unset or give a Parquet file with each response's tokens")
    elif run.whitening.whiten or run.reward.whiten_tokens:
        missing = "whitening over tokens needs each response's token mask (response_mask)"
    elif run.whitening.batch_normalize:  # SkyRL's advantage_batch_normalize: statistics over the padded grid
        missing = ("advantage batch normalisation counts every response token (mean over the padded rows × "
                   "longest-row grid, variance over the mask=1 tokens), so needs each response's token mask "
                   "(response_mask)")
    if not missing:
        return None
    return missing, AdvcliError(f"{info.source}: {a_title(info.title)} dump holds one reward per response and no token "
                                f"data; {missing}, which this dump lacks", hint=hint)


def unread_files(inputs) -> list[str]:
    """The data files of the dumps behind ``inputs`` (their temporary Parquet) that were left out, "path (why)":
    an empty step file, a compressed one, one not named as the dump's (``ImportInfo.unread``)."""
    import os

    from ..config import CONFIG_FILES_READ

    return [x for p in inputs if p in IMPORTED for x in IMPORTED[p].unread
            if os.path.realpath(x.split(" (", 1)[0]) not in CONFIG_FILES_READ]  # a --config in the dump's folder


def name_sources(result) -> None:
    """A RunResult whose inputs, warnings and diagnostics name the dumps rather than their temporary
    Parquet (for its summary and reports), without the figures its dump cannot give, and with a warning for
    each of the dump's data files the run did not read (``ImportInfo.unread``) and for what its reader met
    (``ImportInfo.warnings``: tokens without a log-prob, ...)."""
    if result is None:
        return
    inputs = list(getattr(result, "inputs", None) or [])
    drop_result_token_figures(result, inputs)
    said = [*(f"left out of the dump, not read: {x}" for x in unread_files(inputs)),  # said, not silent
            *(w for p in inputs if p in IMPORTED for w in IMPORTED[p].warnings)]
    if said and getattr(result, "warnings", None) is not None:
        result.warnings = [*result.warnings, *said]
    if getattr(result, "inputs", None):
        result.inputs = [source_of(p) for p in result.inputs]
    for attr in ("warnings", "diagnostics"):
        if getattr(result, attr, None):
            setattr(result, attr, name_dumps(getattr(result, attr)))


def finish_outputs(inputs: list[str], outputs: list[str], result=None) -> None:
    """A response-level run's outputs: ``advantages``/``returns`` (row-constant lists: one token, or the
    response's length) become float32 scalars, ``token_level_rewards`` the row's sum, and the synthetic mask
    is dropped, file by file (rewritten through a temporary file).
    ``result`` (a RunResult): its inputs name the dumps rather than their temporary Parquet."""
    name_sources(result)
    flags = [p in IMPORTED and IMPORTED[p].level == "response" for p in inputs]
    if not any(flags):
        return
    targets = outputs if len(outputs) == len(inputs) else outputs if all(flags) else []
    for i, out in enumerate(targets):
        if len(outputs) == len(inputs) and not flags[i]:
            continue
        from ..io import remote

        if remote.is_uri(out):  # --engine ray's prefix on object storage (its temporary one, when staged)
            for uri in remote.expand(out):
                _scalarize_remote(uri)
            continue
        paths = [out]
        if os.path.isdir(out):
            paths = sorted(os.path.join(out, n) for n in os.listdir(out) if n.endswith(".parquet"))
        for p in paths:
            _scalarize(p)


def _scalarize_remote(uri: str) -> None:
    """:func:`_scalarize` on an object: a local copy rewritten, then put back (one upload: the object is
    replaced whole)."""
    import shutil
    import tempfile

    from ..io import remote

    fs, key = remote.filesystem_of(uri)
    d = tempfile.mkdtemp(prefix="advcli-scalarize-")
    try:
        local = os.path.join(d, "part.parquet")
        with remote.open_input(uri) as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, remote.COPY_CHUNK)
        _scalarize(local)
        remote.put_file(fs, local, key)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _scalarize(path: str) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ..io.reader import parquet_batches
    from ..io.writer import temp_path_for

    f = pq.ParquetFile(path)
    old = f.schema_arrow
    lists = [n for n in RESERVED if n in old.names and pa.types.is_list(old.field(n).type)]
    drop = {"response_mask"} if "response_mask" in old.names else set()
    fields = [pa.field(fl.name, pa.float32()) if fl.name in lists else fl for fl in old if fl.name not in drop]
    meta = dict(old.metadata or {})
    if b"advcli.import" in meta:  # the one-token mask is gone: reading this file back adds it again
        rec = json.loads(meta[b"advcli.import"])
        rec["synthetic_mask"] = False
        meta[b"advcli.import"] = json.dumps(rec).encode()
    schema = pa.schema(fields, metadata=meta)
    tmp = temp_path_for(path)  # .NAME.advcli-tmp-PID: another process finishing the same output writes its own
    w = pq.ParquetWriter(tmp, schema, compression="zstd")
    try:
        for batch in parquet_batches(f, path, batch_size=65536):
            cols = []
            for fl in schema:
                col = batch.column(fl.name)
                if fl.name in lists and fl.name == "token_level_rewards":
                    # the sequence reward: Σ over the row (the reward sits on the last of its response_length tokens)
                    col = _row_sums32(col)
                elif fl.name in lists:
                    col = pc.list_element(col, 0).cast(pa.float32())
                cols.append(col)
            w.write_batch(pa.RecordBatch.from_arrays(cols, schema=schema))
        w.close()
        f.close()
        os.replace(tmp, path)
    except BaseException:
        w.close()
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _row_sums32(col):
    """Σ of each row's list (float64, one-value rows their value itself) as float32."""
    import numpy as np
    import pyarrow as pa

    offs = col.offsets.to_numpy()
    vals = col.values.to_numpy(zero_copy_only=False).astype(np.float64)
    out = np.zeros(len(col), np.float64)
    has = offs[1:] > offs[:-1]
    out[has] = np.add.reduceat(vals, offs[:-1][has]) if vals.size else 0.0
    return pa.array(out.astype(np.float32))


# figures that count tokens: a dump without token data cannot give them (its one-token rows would make
# every response one token long), so they are left out of every summary, report and tracker
TOKEN_FIGURES = ("response_length/", "response_length_non_aborted/", "response/aborted_ratio", "prompt_length/")


def no_token_data(inputs: list[str], figures: str | None = "advantage and return") -> str | None:
    """Why token figures are absent for these (opened) inputs: a response-level dump that gives no token
    count per response; None when every input has its tokens (or the response lengths). ``figures``: what the
    report holds over responses (a run's advantages and returns; stats of a dump: what it logged, or None)."""
    infos = [IMPORTED[p] for p in inputs if p in IMPORTED and IMPORTED[p].level == "response"
             and not IMPORTED[p].token_lengths]
    if not infos:
        return None
    return (f"{a_title(infos[0].title)} dump holds one reward per response and no token data: token counts, response "
            "lengths and token shares are left out" + (f"; {figures} figures are over responses, one value each"
                                                       if figures else ""))


def drop_token_figures(rep: dict, reason: str) -> dict:
    """``rep`` (a report dict, or a result's fields as one) without the figures a dump without token data
    cannot give (:data:`TOKEN_FIGURES`, token counts and rates, token shares, lengths by outcome, the
    advantage by token position), ``no_token_data`` saying why; histograms over its one-token rows are
    over rows."""
    def keep(d: dict) -> dict:
        return {k: v for k, v in d.items() if not k.startswith(TOKEN_FIGURES)}

    if rep.get("metrics") is not None:
        rep["metrics"] = keep(rep["metrics"])
    if rep.get("per_step") is not None:
        rep["per_step"] = [keep(e) for e in rep["per_step"]]
    for k in ("tokens", "valid_tokens", "by_position"):
        rep.pop(k, None)
    if isinstance(rep.get("timings"), dict):
        rep["timings"] = {k: v for k, v in rep["timings"].items() if k != "tokens_per_s"}
    for h in (rep.get("histograms") or {}).values():
        if isinstance(h, dict) and h.get("over") == "tokens":
            h["over"] = "rows"
            h["note"] = "one value per response (the dump holds no token data)"
    gh = rep.get("group_health")
    if isinstance(gh, dict):
        gh.pop("length_by_outcome", None)
        for e in [gh.get("overall") or {}, *(gh.get("per_step") or [])]:
            e.pop("zero_adv_token_share", None)
    rep["no_token_data"] = reason
    return rep


def drop_result_token_figures(result, inputs: list[str]) -> None:
    """A RunResult of ``inputs`` (opened) without the figures its dump cannot give
    (:func:`drop_token_figures`)."""
    reason = no_token_data(inputs)
    if result is None or not reason:
        return
    fields = ("metrics", "per_step", "tokens", "valid_tokens", "by_position", "histograms", "group_health")
    rep = drop_token_figures({k: getattr(result, k, None) for k in fields}, reason)
    for k in (*fields, "no_token_data"):
        setattr(result, k, rep.get(k))

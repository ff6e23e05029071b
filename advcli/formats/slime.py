"""``slime-pt``: slime's rollout dumps, ``--save-debug-rollout-data TEMPLATE`` or ``--dump-details DIR``
(``DIR/rollout_data/{rollout_id}.pt``) (THUDM/slime @ 624b824a, writer
``slime/observability/rollout_data_utils.py`` L140-153, ``Sample.to_dict`` ``slime/utils/types.py``
L222-228).

A file is ``torch.save({"rollout_id": id, "samples": [Sample.to_dict(), ...]})``: plain dicts, lists,
strings and numbers, loaded here with ``torch.load(weights_only=True)`` (no class is ever unpickled; a
file that needs more is refused with how to re-save it). One canonical row per sample:

* ``prompt_id`` = ``group_index`` (slime's prompt-group counter); ``step`` = ``rollout_id``;
* ``reward`` = ``reward`` (a dict of several rewards becomes ``reward/<name>`` columns: pick one with
  ``--column reward=reward/NAME``, as slime's ``--reward-key`` does);
* ``response_mask`` = ``loss_mask`` (None: all ones over ``response_length``; 0 on tool/env tokens),
  all zeros when ``remove_sample`` is true: the file is written before ``_convert_samples_to_train_data``
  zeroes a removed sample's loss mask (slime/ray/rollout.py L680), and the sample stays in its group's
  reward statistics but leaves the whitening and the loss;
  ``rollout_log_probs`` / ``teacher_log_probs`` = the same fields (per response token; the teacher's
  for on-policy distillation).

The train dump (``--save-debug-train-data``, ``format_version`` 2) is another format
(:mod:`advcli.formats.slime_train`), read when given on its own (a file, or the ``train_data/`` folder);
``--dump-details`` directories are read through their ``rollout_data/`` files, ``train_data/`` and ``eval_*``
rollouts being skipped. The per-rank train dumps of slime v0.3.1 and older are refused.
"""
from __future__ import annotations

import json
import numbers
import os
import re

from . import Context, Format, number, number_list
from ._common import F32, F32_LIST, I64, MASK, STR

# train_data/{rollout_id}.pt from #2266 (after v0.3.1); before it, one file per rank, train_data/{rollout_id}_{rank}.pt
TRAIN_DUMP = r"(^|/)train_data/\d+(_\d+)?\.pt$"
PATTERN = r"(^|/)rollout_data/(?P<step>\d+)\.pt$|" + TRAIN_DUMP + r"|\.pt$"
_CACHE: dict = {}

EXPORT = ("load it where slime is installed and save plain values: d = torch.load(P, weights_only=False); "
          "torch.save({'rollout_id': d['rollout_id'], 'samples': [{k: v for k, v in s.items() if k != "
          "'metadata'} for s in d['samples']]}, OUT)")


class Damaged(RuntimeError):
    """A file that is no complete torch.save output (truncated, corrupt, or not one at all)."""


DAMAGED_HINT = "take it again from the run, or dump that rollout again; move it out to read the other steps"


def _pickles_complete(fh, count: int) -> bool:
    """Whether the next ``count`` pickles of ``fh`` (or those before its end) are whole: every opcode known and
    each ending in STOP. Their opcodes are only scanned (:mod:`pickletools`), never run."""
    import pickletools

    for _ in range(count):
        if not fh.read(1):  # the end: the pickles before it were whole
            return True
        fh.seek(-1, 1)
        try:
            for _op, _arg, _pos in pickletools.genops(fh):
                pass
        except Exception:  # noqa: BLE001 - an unknown opcode, a cut argument, no STOP before the end
            return False
    return True


def damage(path: str) -> str | None:
    """What makes ``path`` no complete torch.save file (None when it looks whole, its failure then being the
    classes it needs): a zip archive (torch.save's format) whose directory or members are missing or damaged,
    a pickle (torch's legacy format, or pickle.dump) cut short or holding bytes no pickle has, or neither."""
    import zipfile

    with open(path, "rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK"):
        if not zipfile.is_zipfile(path):
            return "not a complete torch.save archive (its zip directory at the end of the file is missing)"
        try:
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
                if bad is not None:
                    return f"a damaged torch.save archive (its member {bad} fails its checksum)"
                pkl = [n for n in z.namelist() if n.endswith("data.pkl")]
                if not pkl:
                    return "not a torch.save archive (a zip file with no data.pkl)"
                import io

                if not _pickles_complete(io.BytesIO(z.read(pkl[0])), 1):
                    return f"a damaged torch.save archive (its {pkl[0]} is not a whole pickle)"
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            return f"a damaged torch.save archive ({e})"
        return None
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        with open(path, "rb") as fh:  # torch's legacy format is five pickles, then the storages' bytes
            return None if _pickles_complete(fh, 5) else "a pickle cut short or damaged, not a complete torch.save file"
    return "not a torch.save file (it starts with neither a zip archive's header nor a pickle's)"


def load(path: str):
    """The file's object (cached for the content check and the read), loaded without unpickling classes."""
    key = (os.path.realpath(path), os.path.getmtime(path))
    if key in _CACHE:
        return _CACHE[key]
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols it may not read: said below if so
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, ModuleNotFoundError) as e:
        why = damage(path)
        if why is not None:
            obj = Damaged(f"{why}: the file is truncated or corrupt (a run killed while saving it, a copy that "
                          "did not finish)")
        else:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            obj = RuntimeError(f"cannot be loaded without unpickling Python classes ({first[:160]})")
    except (EOFError, OSError, ValueError) as e:
        obj = Damaged(f"truncated or not a torch.save file ({type(e).__name__}: {str(e)[:120]})")
    _CACHE.clear()
    _CACHE[key] = obj
    return obj


def first(path: str) -> dict | None:
    if not path.endswith(".pt"):
        return None
    obj = load(path)
    if isinstance(obj, Exception):
        return {"__error__": str(obj)}
    return obj if isinstance(obj, dict) else None


def refuse(path: str) -> str | None:
    obj = load(path) if path.endswith(".pt") else None
    if isinstance(obj, Damaged):
        return f"{obj}; {DAMAGED_HINT}"
    if isinstance(obj, Exception):
        return f"{obj}; advcli never unpickles arbitrary classes. To read it, {EXPORT}"
    if isinstance(obj, dict) and _train_dump(obj):
        return ("a slime train dump of one rank (--save-debug-train-data before slime #2266, v0.3.1 and older): "
                "it holds one data-parallel rank's samples without their places in the rollout; read the rollout "
                "dump instead (--save-debug-rollout-data, or the rollout_data/ folder of --dump-details)")
    return None


def _plain(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "tolist"):
        v = v.tolist()
    return json.dumps(v, ensure_ascii=False, default=str)


def _log_probs(ctx: Context, where: str, field: str, value, n: int) -> list[float]:
    """A sample's per-token log-probs as floats: a list (or tensor) of ``n`` numbers; anything else is refused,
    naming the sample, the field and the position (a string there raised ValueError: exit 1)."""
    vals = number_list(ctx, None, value, field, f"{n} log-probs, one per response token", where=f"{where}: ",
                       hint="repair the sample's log-probs, or re-dump that rollout")
    if len(vals) != n:
        raise ctx.error(None, f"{where}: {field} has {len(vals)} values but response_length is {n}")
    return [float(x) for x in vals]


def read(path: str, ctx: Context):
    obj = load(path)
    samples = obj.get("samples")
    if not isinstance(samples, list):
        raise ctx.error(None, "no 'samples' list (slime rollout dumps are {'rollout_id', 'samples'})")
    step = obj.get("rollout_id", ctx.step)
    if not isinstance(step, int):
        step = ctx.step
    for i, s in enumerate(samples, 1):
        if not isinstance(s, dict):
            raise ctx.error(None, f"sample {i - 1} is {type(s).__name__}; expected a dict (Sample.to_dict())",
                            hint="repair or remove that sample, or re-dump that rollout")
        where = f"sample {i - 1}"
        for k in ("group_index", "reward", "response_length"):
            if k not in s:
                raise ctx.error(None, f"{where}: missing field {k!r} of a slime sample")
        gi = s["group_index"]  # the prompt group: a null one became a group of its own (prompt_id 'None')
        if not isinstance(gi, numbers.Integral) or isinstance(gi, bool):
            raise ctx.error(None, f"{where}: field 'group_index' is {gi!r}; expected an integer (slime's prompt-group "
                            "counter, which groups the samples)", hint="repair the sample's group_index, or re-dump "
                            "that rollout")
        n = s["response_length"]
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
            raise ctx.error(None, f"{where}: field 'response_length' is {n!r}; expected a whole number >= 0 (the "
                            "response's token count)", hint="repair the sample's response_length, or re-dump that "
                            "rollout")
        n = int(n)
        lm = s.get("loss_mask")
        if lm is None:
            lm = [1] * n
        lm = lm.tolist() if hasattr(lm, "tolist") else lm
        if not isinstance(lm, (list, tuple)):
            raise ctx.error(None, f"{where}: field 'loss_mask' is {lm!r}; expected a list of {n} values 0 or 1")
        if len(lm) != n:
            raise ctx.error(None, f"{where}: loss_mask has {len(lm)} values but response_length is {n}")
        check_loss_mask(ctx, where, "loss_mask", lm)
        if s.get("remove_sample"):  # _convert_samples_to_train_data (rollout.py L680) zeroes a removed sample's mask
            lm = [0] * n
        row = {"prompt_id": str(s["group_index"]), "step": step, "response_mask": [1 if x else 0 for x in lm]}
        r = s["reward"]
        if isinstance(r, dict):
            for k, v in r.items():
                row[f"reward/{k}"] = number(ctx, None, v, f"{where}: reward.{k}", allow_none=True)
            if "reward_dict" not in ctx.state:
                ctx.state["reward_dict"] = True
                ctx.notes.append(f"rewards are dicts ({', '.join(r)}): pick one with --column reward=reward/NAME")
        else:
            row["reward"] = number(ctx, None, r, f"{where}: reward", allow_none=True)
        # rollout_log_probs; teacher_log_probs: on-policy distillation (--use-opd), the teacher's per response token
        for field in ("rollout_log_probs", "teacher_log_probs"):
            if s.get(field) is not None:
                row[field] = _log_probs(ctx, where, field, s[field], n)
        toks = s.get("tokens")
        if toks is not None:
            row["tokens"] = toks.tolist() if hasattr(toks, "tolist") else list(toks)
        for k in ("index", "response_length", "response", "label", "status", "remove_sample", "prompt",
                  "weight_versions", "rollout_id"):
            if k in s and k not in row:
                row["sample_rollout_id" if k == "rollout_id" else k] = _plain(s[k])
        yield i, row


def check_loss_mask(ctx: Context, where: str, field: str, values) -> None:
    """A sample's loss mask holds only 0 and 1 (the rollout dump's ``loss_mask``, the train dump's ``loss_masks``):
    slime multiplies by the mask and sums it as the token count, so a 2 would count a token twice."""
    odd = next((k for k, x in enumerate(values) if x not in (0, 1)), None)
    if odd is not None:
        raise ctx.error(None, f"{where}: field {field!r} holds {values[odd]!r} at position {odd}; a loss mask is 0 or "
                        "1", hint="fix the dump's mask (advcli does not guess what another value means)")


def _details_train_data(folder: str) -> str | None:
    """``folder/train_data`` where ``folder`` is laid out as slime's ``--dump-details`` writes it: a
    ``rollout_data/`` of rollout dumps (``{rollout_id}.pt``) or a ``train_data/`` already; else None."""
    rollouts, trains = os.path.join(folder, "rollout_data"), os.path.join(folder, "train_data")
    if os.path.isdir(trains) or (os.path.isdir(rollouts) and any(
            re.fullmatch(r"\d+\.pt", name) for name in os.listdir(rollouts))):
        return trains
    return None


def _train_dump(rec: dict) -> bool:
    """Whether a loaded .pt is slime's train dump from before #2266 (v0.3.1 and older): one file per rank holding
    {rollout_id, rank, rollout_data} (slime/utils/train_dump_utils.py L9-15 @v0.3.1), without the samples' places
    in the rollout. (format_version 2, after it, is read: :mod:`advcli.formats.slime_train`.)"""
    return "rollout_data" in rec and "rank" in rec and "samples" not in rec


def sniff(rec: dict) -> bool:
    return ("samples" in rec and "format_version" not in rec) or "__error__" in rec or _train_dump(rec)


FORMAT = Format(
    name="slime-pt", title="slime rollout dump (.pt)",
    pattern=PATTERN, level="token",
    group_key="group_index", group_rule="group_index (slime's prompt-group counter)",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "response_mask": MASK, "rollout_log_probs": F32_LIST,
             "teacher_log_probs": F32_LIST,
             "tokens": "list<int64>", "index": I64, "response_length": I64},
    read=read, sniff=sniff, first_record=first, refuse=refuse, required=("samples",),
    logged_elsewhere="slime writes the advantages it trained on in its train dump (--save-debug-train-data, or "
                     "DIR/train_data/ of --dump-details): advcli audit DIR/train_data --flavor slime",
    beside_formats=("slime-train",),  # --save-debug-rollout-data data_{id}.pt beside train_{id}.pt (debug.md)
    companions=((TRAIN_DUMP, "slime's train dump, read on its own: advcli audit DIR/train_data --flavor slime"),
                r"(^|/)rollout_data/eval_\d+\.pt$",
                # --save-debug-rollout-data TEMPLATE's eval dumps: {rollout_id} filled with eval_{id} (data_eval_3.pt)
                (r"(^|/)[^/]*_eval_\d+\.pt$", "slime's evaluation rollout dump (the template's eval_{rollout_id})")),
    key=lambda p: FORMAT.step_of(p) if FORMAT.step_of(p) is not None else p,
    logged_folder=_details_train_data,
    example="advcli run dump_details/rollout_data --output out.parquet --flavor slime",
)

"""The checks of a dump's values, on numpy arrays (torch-free): ``advcli run`` makes them as it reads each
chunk, ``advcli validate`` on a pass that reads the columns without the math. Each names the file, column,
row (and position) of the first bad value and raises :class:`advcli.errors.AdvcliError`."""
from __future__ import annotations

import numpy as np

from ..errors import AdvcliError


def check_lengths(mask_offsets: np.ndarray, offs: np.ndarray, file: str, name: str, mask_name: str,
                  row_base: int) -> None:
    """Every row of token column ``name`` as long as the mask's."""
    if not np.array_equal(offs, mask_offsets):
        lm, lc = np.diff(mask_offsets), np.diff(offs)
        bad = int(np.nonzero(lm != lc)[0][0])
        raise AdvcliError(f"{file}: row {row_base + bad}: column {name!r} has {lc[bad]} tokens but "
                          f"{mask_name!r} has {lm[bad]}; every token column of a row must have the "
                          "same length", hint="a trainer reading this dump beside the new columns would "
                                              "misalign them: repair or drop the row")


def check_finite(vals: np.ndarray, offsets: np.ndarray, file: str, name: str, row_base: int,
                 allow_neg_inf: bool = False, source: np.ndarray | None = None,
                 checked: np.ndarray | None = None) -> None:
    """No NaN or ±inf among the flat token values ``vals`` (rows by ``offsets``); ``allow_neg_inf``: −inf
    passes (a log-prob read only by a KL that clamps its log-ratio first). ``source``: the values as the file
    holds them, before ``vals`` was cast to the run's precision: a finite one the cast made infinite is said
    to be beyond that precision. ``checked``: the flat mask (nonzero: checked) where only the mask=1 tokens
    matter (a log-prob read only by verl's rollout correction, which masks every sum)."""
    # one reduction instead of a bool array: a NaN/inf makes the sum non-finite; a finite sum that
    # overflowed only sends us to the exact check
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(vals.sum()) or np.isfinite(vals).all():
            return
        bad = ~np.isfinite(vals)
        if allow_neg_inf:
            bad &= ~np.isneginf(vals)
        if checked is not None:
            bad &= checked != 0
        if (allow_neg_inf or checked is not None) and not bad.any():
            return
    pos = int(np.nonzero(bad)[0][0])
    row = int(np.searchsorted(offsets, pos, side="right") - 1)
    if source is not None and np.isfinite(source[pos]):
        top = float(np.finfo(vals.dtype).max)
        raise AdvcliError(f"{file}: column {name!r}, row {row_base + row}, position {pos - offsets[row]}: value "
                          f"{float(source[pos]):.6g} is beyond {vals.dtype} (up to {top:.3g}), the run's precision",
                          hint="run with --precision float64, or scale the column down")
    raise AdvcliError(f"{file}: column {name!r}, row {row_base + row}, position "
                      f"{pos - offsets[row]}: value {float(vals[pos])} is not finite",
                      hint="NaN or infinite log-probs/values would poison every statistic; "
                           "drop or repair the row")


def note_unread_value(warnings: list, message: str, name: str) -> None:
    """Append to ``warnings`` the warning for a non-finite value (``message``, the refusal a run that read it
    would give) in a token column ``name`` this run does not read, once per column: the run goes ahead (its
    numbers do not depend on it), as ``validate`` says."""
    said = f"this run does not read column {name!r}"
    if not any(said in w for w in warnings):
        warnings.append(f"{message}; {said}, so it runs as it is (a run that reads it, a KL or rollout correction "
                        "on it, refuses it)")


def check_mask(mask: np.ndarray, offsets: np.ndarray, file: str, column: str, row_base: int) -> None:
    """A response mask holds only 0 and 1.

    Every framework multiplies by the mask (a weight of 2 would count a token twice, -1 would flip
    its sign) and counts Σm as the number of trained tokens, so only 0/1 masks have a meaning."""
    if mask.dtype == np.bool_ or mask.size == 0:
        return
    bad = (mask != 0) & (mask != 1)
    if bad.any():
        pos = int(np.nonzero(bad)[0][0])
        row = int(np.searchsorted(offsets, pos, side="right") - 1)
        raise AdvcliError(f"{file}: column {column!r}, row {row_base + row}, position {pos - offsets[row]}: mask "
                          f"value {mask[pos].item()}; a response mask holds only 0 or 1",
                          hint="1 marks a trained token, 0 a masked one (prompt padding, tool output); "
                               "convert the column, e.g. (mask != 0).astype(int8)")


def check_row_numbers(values: np.ndarray, file: str, name: str, row_base: int, allow_nan: bool = False,
                      source: np.ndarray | None = None) -> None:
    """A per-row number column (a reward) without NaN or ±inf (``allow_nan``: NaN allowed, ±inf not). ``source``:
    the values as the file holds them, before ``values`` was cast to the run's precision: a finite one the cast
    made infinite is said to be beyond that precision."""
    if values.dtype.kind != "f":
        return
    bad_mask = np.isinf(values) if allow_nan else ~np.isfinite(values)
    if bad_mask.any():
        bad = int(np.nonzero(bad_mask)[0][0])
        if source is not None and source.dtype.kind == "f" and np.isfinite(source[bad]):
            top = float(np.finfo(values.dtype).max)
            raise AdvcliError(f"{file}: column {name!r}, row {row_base + bad}: value {float(source[bad]):.6g} is "
                              f"beyond {values.dtype} (up to {top:.3g}), the run's precision",
                              hint="run with --precision float64, or scale the column down")
        raise AdvcliError(f"{file}: column {name!r}, row {row_base + bad}: reward {float(values[bad])} is not finite",
                          hint="verl/NeMo would propagate NaN into the whole group's advantages; advcli refuses "
                               "it. Drop the row or give it a real reward")


def file_row(paths: list[str], file_rows: list[int], row: int) -> tuple[str, int]:
    """The file of an input of several and the row in it of the input's global row ``row``."""
    ends = np.cumsum(file_rows)
    k = min(int(np.searchsorted(ends, row, side="right")), len(paths) - 1)
    return paths[k], row - (int(ends[k - 1]) if k else 0)


def unplaced_reward(file: str, row: int, count: int) -> AdvcliError:
    """The refusal of a row without a mask=1 token where the reward must sit on the last one."""
    return AdvcliError(f"{file}: row {row} has no mask=1 token, so its reward has no token to sit on ({count} "
                       "such rows); the framework stops here (slime reinforce_plus_plus: assert "
                       "full_mask.sum() > 0, ppo_utils.py L415)",
                       hint="drop the fully masked rows, or use another estimator")


def empty_response(file: str, row: int, count: int) -> AdvcliError:
    """The refusal of an empty response (0 tokens) under ``reward.empty_row=error``: SkyRL places a response-level
    reward with ``per_token_reward[-1]``, an IndexError on an empty response."""
    return AdvcliError(f"{file}: row {row} is an empty response (0 tokens; {count} such rows): SkyRL stops here, "
                       "placing its response-level reward with per_token_reward[-1] on an empty list (IndexError, "
                       "skyrl/train/trainer.py L1105 @a9564572, the same line in every release)",
                       hint="drop the empty responses: they have no token to train, and SkyRL's run stops on "
                            "them (a reward function returning token-level rewards, one per token, is the only "
                            "way SkyRL runs them)")


def refuse_unplaced_rows(reward, reward_source: str, paths: list[str], file_rows: list[int], no_mask: tuple,
                         no_tokens: tuple) -> None:
    """The rows a run's reward cannot be placed on, refused where the flavor's trainer stops on them (``reward``: the
    run's :class:`advcli.config.runspec.Reward`): a row without a mask=1 token under ``unplaced=error`` (slime's
    reinforce_plus_plus), an empty response under ``empty_row=error`` (SkyRL, row rewards only). ``no_mask`` and
    ``no_tokens``: (the input's first such row, how many), each engine counting them its own way; the row is named
    by its file and its row there."""
    if no_mask[1] and reward.unplaced == "error" and reward.placement == "last_valid":
        raise unplaced_reward(*file_row(paths, file_rows, no_mask[0]), no_mask[1])
    if no_tokens[1] and reward.empty_row == "error" and reward_source != "token_level_scores":
        raise empty_response(*file_row(paths, file_rows, no_tokens[0]), no_tokens[1])


def token_lists_whole(batch, columns: list[str], mask_col: str, file: str, row_base: int) -> None:
    """The token list columns ``columns`` and the mask ``mask_col`` of an Arrow batch without a null row or element,
    each row as long as its mask: refused as ``advcli run`` refuses them (file, column and row named), for the
    commands that read them without the run's checks (``stats``), where the columns would misalign."""
    import pyarrow as pa

    from .lists import check_no_nulls, list_offsets

    check_no_nulls(batch.column(mask_col), file, mask_col, row_base)
    offsets = list_offsets(batch.column(mask_col))
    for c in columns:
        t = batch.column(c).type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):  # (a string's offsets are its characters')
            raise AdvcliError(f"{file}: column {c!r} holds {t}, one value a row, where a value per token is read "
                              f"(the rows' {mask_col!r} holds token lists)",
                              hint=f"rename the column (advcli reads {c!r} as token values), or give each row its "
                                   "values as a list as long as its mask")
        check_no_nulls(batch.column(c), file, c, row_base)
        check_lengths(offsets, list_offsets(batch.column(c)), file, c, mask_col, row_base)

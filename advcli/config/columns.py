"""Column roles: which input column plays which part, detection, and type checks with clear errors."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..errors import AdvcliError, MissingColumn, did_you_mean
from .column_roles import ROLE_INFO


def is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


@dataclass(frozen=True)
class ColumnMap:
    """role -> column name actually present in the input (roles absent from the input are left out)."""

    names: dict[str, str]
    schema: pa.Schema
    file: str

    def has(self, role: str) -> bool:
        return role in self.names

    def __getitem__(self, role: str) -> str:
        return self.names[role]

    def require(self, role: str, why: str) -> str:
        if role not in self.names:
            import shlex

            default = ROLE_INFO.get(role, (role,))[0]
            near = self.candidate(role)
            hint = f"map another column to it with --column {shlex.quote(role + '=' + (near or 'NAME'))}"
            if role == "response_mask" and not near and not any(
                    is_list_type(f.type) and is_numeric(f.type.value_type) for f in self.schema):
                # one value a response and no token lists: a table of rewards (a CSV's, a DataFrame's)
                hint = ("the rows hold one value a response and no token lists: such a table runs on its own "
                        "(scalar advantages), not among token-level files or with --from parquet; there give each "
                        "row a one-token mask, e.g. pandas: df['response_mask'] = [[1]] * len(df) (its advantages "
                        "are then one-element lists)")
            from . import column_roles

            if column_roles.DUMP_HINT is not None:  # a trainer's dump renamed, or a table of its records
                hint = column_roles.DUMP_HINT(self.schema.names) + hint
            raise MissingColumn(
                f"{self.file}: missing column {default!r} ({why})."
                + (f" Did you mean {near!r}?" if near else "")
                + f" Columns present: {', '.join(self.schema.names)}",
                hint=hint, role=role)
        return self.names[role]

    def candidate(self, role: str) -> str | None:
        """The column most likely meant for ``role``: one of the role's usual other names
        (:data:`OTHER_NAMES`: ``score`` for the reward), else the name nearest the role's column, among the
        columns of the role's kind (a number per row, or per token) that play no other role."""
        default, kind = ROLE_INFO.get(role, (role, "scalar", ""))[:2]
        taken = set(self.names.values())

        def fits(name: str) -> bool:
            t = self.schema.field(name).type
            return (is_list_type(t) and is_numeric(t.value_type)) if kind == "tokens" else (
                kind != "scalar" or is_numeric(t))

        free = [n for n in self.schema.names if n not in taken and fits(n)]
        for name in OTHER_NAMES.get(role, ()):
            if name in free:
                return name
        from ..errors import nearest

        return nearest(default, free)


# the names other trainers and datasets give a role's column, most likely first (a missing column's hint)
OTHER_NAMES = {
    "reward": ("score", "scores", "rewards", "reward_score", "rm_score", "final_reward", "acc", "accuracy"),
    "prompt_id": ("uid", "group_id", "prompt_uid", "prompt_idx", "question_id", "query_id", "task_id"),
    "response_mask": ("loss_mask", "token_loss_mask", "action_mask", "mask"),
}


def resolve_columns(schema: pa.Schema, overrides: dict[str, str], file: str) -> ColumnMap:
    """Find each role's column: an explicit ``--column role=name`` (which must exist) or the default name."""
    names: dict[str, str] = {}
    for role, (default, _, _) in ROLE_INFO.items():
        if role in overrides:
            col = overrides[role]
            if col not in schema.names:
                raise AdvcliError(f"{file}: --column {role}={col}: no column {col!r}."
                                  f"{did_you_mean(col, schema.names)} Columns present: {', '.join(schema.names)}")
            names[role] = col
        elif default in schema.names:
            names[role] = default
    for role, col in overrides.items():
        if role not in names:
            names[role] = col
    cmap = ColumnMap(names, schema, file)
    for role, col in names.items():
        check_type(schema, role, col, file)
    return cmap


def bypass_columns(cmap: ColumnMap, bypass: bool) -> ColumnMap:
    """``cmap`` with the rollout_log_probs column read as old_log_probs where ``bypass`` (verl's bypass mode,
    ``rollout_correction.bypass``: apply_bypass_mode sets batch["old_log_probs"] = batch["rollout_log_probs"],
    rollout_corr_helper.py L1130-1138 @1dda039b) and the input has one."""
    if not bypass or not cmap.has("rollout_log_probs"):
        return cmap
    return ColumnMap({**cmap.names, "old_log_probs": cmap["rollout_log_probs"]}, cmap.schema, cmap.file)


def _type_name(t: pa.DataType) -> str:
    """``list<float>`` rather than pyarrow's ``list<element: float>``."""
    if is_list_type(t):
        return f"list<{_type_name(t.value_type)}>"
    return str(t)


def check_type(schema: pa.Schema, role: str, col: str, file: str) -> None:
    if col not in schema.names:
        raise AdvcliError(f"{file}: no column {col!r}.{did_you_mean(col, schema.names)}")
    t = schema.field(col).type
    kind = ROLE_INFO.get(role, (col, "scalar", ""))[1]
    what = f"{file}: column {col!r}" + (f" ({role})" if role != col else "") + f" has type {_type_name(t)}"
    other = f"or map another column to the role with --column {role}=NAME"
    if kind == "tokens":
        if not is_list_type(t) or not is_numeric(t.value_type):
            raise AdvcliError(f"{what}; expected a list of numbers per row (list<float32>; list<int8> for the mask)",
                              hint=f"store one number per token, e.g. table.cast(...) in pyarrow, {other}")
    elif kind == "scalar":
        if not is_numeric(t):
            raise AdvcliError(f"{what}; expected one number per row",
                              hint=f"cast it to float32 (pyarrow: pc.cast(col, pa.float32())), {other}")
    elif kind == "int":
        if not pa.types.is_integer(t):
            raise AdvcliError(f"{what}; expected integers", hint=f"cast it to int64, {other}")
    elif kind == "key":
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
                or pa.types.is_dictionary(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
                or pa.types.is_fixed_size_binary(t)):
            why = ("the view layouts are not read yet" if pa.types.is_string_view(t) or pa.types.is_binary_view(t)
                   else "a float key would group by rounded values" if pa.types.is_floating(t)
                   else f"a {t} key is read as no id")
            raise AdvcliError(f"{what}; expected string, large_string, binary or integers ({why})",
                              hint=f"cast the ids to string or int64 (pyarrow: pc.cast(col, pa.string())), {other}")

"""Your own estimator: a Python function run inside the pipeline (``--estimator my_pkg.adv:my_fn``).

A user function becomes an :class:`EstimatorSpec` registered for the run under the reference it was
named by: ``module.path:function``, ``path/to/file.py:function``, or the name of an entry point in the
group ``advcli.estimators`` of an installed package. The declaration (:func:`estimator`, exposed as
``advcli.estimator``) is plain attributes on the function; this module imports torch only when the
function is run.

The calling convention (docs/api.md), keyword arguments the function names (all of them with ``**kw``):

- ``level="row"``: called once per step (scope) with that step's rows::

      rewards  float [B]  the row score s_i = Σ_t token_level_rewards (after reward shaping and KL)
      group    int64 [B]  the row's group, 0 .. G−1 within the step (with groups=True)
      lengths  int64 [B]  the row's trained tokens Σ_t mask
      step     int        the step's index (0-based, in input order)

  returns ``A`` float [B]; the token advantage is ``A_i`` on every mask=1 token.
- ``level="token"``: called once per chunk of whole rows with right-padded ``[B, T]`` tensors::

      token_rewards  float [B, T]  token_level_rewards (the reward placed, minus β·KL)
      mask           float [B, T]  the response mask (0 on padding)
      rewards        float [B]     Σ_t token_rewards
      lengths        int64 [B]     Σ_t mask
      group          int64 [B]     the row's group in the input (a chunk may hold part of a group)
      <role>         float [B, T]  each token column named in ``needs`` (values, old_log_probs, ...)

  returns ``A`` float [B, T] (or ``(A, returns)``); padding positions are ignored.

What it returns is checked before anything is written: a tensor of the right shape, a floating dtype,
finite values on every row's tokens; an exception inside it is reported with the function, the rows
and the line of the user's file it came from (exit code 2).
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import traceback
from collections.abc import Callable

from ..errors import AdvcliError
from . import EstimatorSpec

# the user functions a process has run, by reference: kept apart from the registry of advcli's own estimators,
# so that listing those (inspect, explain, the response-level checks) never reloads a user's file
USER_SPECS: dict[str, EstimatorSpec] = {}

DECLARATION = "__advcli_estimator__"  # the attribute advcli.estimator sets on the function
ENTRY_POINT_GROUP = "advcli.estimators"
LEVELS = ("row", "token")
TOKEN_ROLES = ("values", "old_log_probs", "ref_log_probs", "rollout_log_probs", "teacher_log_probs",
               "sum_pi_squared")  # the token columns a token-level function can ask for


def estimator(fn: Callable | None = None, *, level: str = "row", needs: tuple[str, ...] | list[str] = (),
              groups: bool | None = None, name: str | None = None):
    """Declare a function an advcli estimator (``@advcli.estimator(level="token", needs=("values",))``).

    ``level``: ``row`` (one advantage per row, called per step) or ``token`` (one per token, called per
    chunk); ``needs``: token columns a token-level function reads (column roles: values, old_log_probs,
    ref_log_probs, rollout_log_probs, teacher_log_probs, sum_pi_squared); ``groups``: the run must group
    rows by prompt (default: whether the function has a ``group`` parameter); ``name``: the name reports
    show (default: the reference it was given by). Used bare (``@advcli.estimator``) it takes the defaults.
    """
    if level not in LEVELS:
        raise ValueError(f"advcli.estimator: level must be 'row' or 'token', not {level!r}")
    needs = tuple(needs)
    bad = [r for r in needs if r not in TOKEN_ROLES]
    if bad:
        raise ValueError(f"advcli.estimator: needs {bad} are not token columns; choose from {', '.join(TOKEN_ROLES)}")
    if needs and level == "row":
        raise ValueError("advcli.estimator: needs (token columns) are read by level='token' functions only")

    def mark(f: Callable) -> Callable:
        setattr(f, DECLARATION, {"level": level, "needs": needs, "groups": groups, "name": name})
        return f

    return mark(fn) if fn is not None else mark


def is_reference(name: str) -> bool:
    """Whether an estimator name is a user function's reference rather than a registered estimator."""
    return ":" in name or bool(_entry_point(name))


def _entry_point(name: str):
    from importlib.metadata import entry_points

    try:
        found = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == name]
    except Exception:  # noqa: BLE001 (a broken installed distribution must not stop a run by name)
        return None
    return found[0] if found else None


def load(ref: str) -> EstimatorSpec:
    """The spec of the user function ``ref`` names, kept under ``ref`` (loaded once a process)."""
    stamp = _file_stamp(ref)
    if ref in USER_SPECS and getattr(USER_SPECS[ref], "user_stamp", None) == stamp:
        return USER_SPECS[ref]
    fn = _function(ref)
    spec = spec_of(fn, ref)
    object.__setattr__(spec, "user_stamp", stamp)  # a file edited since is loaded again (a long Python session)
    USER_SPECS[ref] = spec
    return spec


def _file_stamp(ref: str) -> tuple | None:
    """(absolute path, modification time) of a file reference's file; None for modules and entry points."""
    where = ref.rpartition(":")[0]
    if not (where.endswith(".py") or os.sep in where or "/" in where):
        return None
    path = os.path.abspath(os.path.expanduser(where))
    try:
        return path, os.stat(path).st_mtime_ns
    except OSError:
        return path, None


FILE_MODULE_PREFIX = "advcli_user_"  # the module name a file.py reference is imported under (+ its path)


def ship_file_functions(pickler) -> None:
    """Have ``pickler`` (Ray's cloudpickle) carry the functions of every ``file.py:function`` loaded in this
    process by value: a worker process (another node, another directory) cannot import the module
    advcli made of the file, so a reference to it would not load there. Functions of installed modules
    (``my_pkg.adv:fn``, entry points) travel by reference: the package must be installed on the workers."""
    for name, module in list(sys.modules.items()):
        if name.startswith(FILE_MODULE_PREFIX):
            pickler.register_pickle_by_value(module)


def register_function(fn: Callable) -> str:
    """Keep a function object (``advcli.run(..., estimator=fn)``) as a user estimator and return its reference."""
    if not callable(fn):
        raise AdvcliError(f"estimator={fn!r}: expected a function or a 'module:function' reference")
    ref = f"{getattr(fn, '__module__', None) or 'python'}:{getattr(fn, '__qualname__', repr(fn))}"
    if getattr(USER_SPECS.get(ref), "user_fn", None) is not fn:
        USER_SPECS[ref] = spec_of(fn, ref)
    return ref


def _function(ref: str) -> Callable:
    """The function a reference names: ``file.py:fn``, ``module:fn`` or an entry point's name."""
    import importlib
    import importlib.util

    if ":" not in ref:
        ep = _entry_point(ref)
        if ep is None:
            raise AdvcliError(f"estimator {ref!r}: no such estimator and no entry point {ref!r} in group "
                              f"{ENTRY_POINT_GROUP}", hint="name a function as module:function or file.py:function")
        try:
            fn = ep.load()
        except Exception as e:  # noqa: BLE001
            raise AdvcliError(f"estimator {ref!r}: entry point {ep.value!r} could not be loaded: "
                              f"{type(e).__name__}: {e}") from None
        return _callable(ref, fn)
    where, _, attr = ref.rpartition(":")
    if not where or not attr:
        raise AdvcliError(f"estimator {ref!r}: expected module:function or path/file.py:function")
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = os.path.abspath(os.path.expanduser(where))
        if not os.path.isfile(path):
            raise AdvcliError(f"estimator {ref!r}: file {where} not found")
        modname = FILE_MODULE_PREFIX + "".join(c if c.isalnum() else "_" for c in path)
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        try:
            with user_code(f"estimator {ref!r}: {where} failed to import", path):
                spec.loader.exec_module(module)
        except AdvcliError:
            sys.modules.pop(modname, None)
            raise
    else:
        try:
            module = _import_here_too(where)
        except ImportError as e:
            raise AdvcliError(f"estimator {ref!r}: module {where!r} cannot be imported ({e})",
                              hint="install it, or run from the directory holding it (or name the file: "
                                   "./file.py:function)") from None
        except Exception as e:  # noqa: BLE001
            raise AdvcliError(f"estimator {ref!r}: module {where!r} failed to import: {type(e).__name__}: {e}"
                              f"{_user_line(e, None)}") from None
    fn = getattr(module, attr, None)
    if fn is None:
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        raise AdvcliError(f"estimator {ref!r}: {where} has no function {attr!r}",
                          hint=f"functions there: {', '.join(found) or '(none)'}")
    return _callable(ref, fn)


def _import_here_too(name: str):
    """``importlib.import_module(name)``, looking in the working directory too when the module is not found
    elsewhere, as ``python -c`` does: the ``advcli`` command's own path does not hold the directory it was run
    from, so ``--estimator my_adv:win_rate`` beside ``my_adv.py`` failed there while working in Python."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        here = os.getcwd()
        if e.name != name.split(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, here)
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(here)


def _callable(ref: str, fn) -> Callable:
    if not callable(fn):
        raise AdvcliError(f"estimator {ref!r}: {type(fn).__name__} is not a function")
    return fn


def spec_of(fn: Callable, ref: str) -> EstimatorSpec:
    """The EstimatorSpec of a user function, from its declaration (defaults: row level, no token columns,
    groups when it has a ``group`` parameter)."""
    decl = dict(getattr(fn, DECLARATION, None) or {})
    level = decl.get("level", "row")
    needs = tuple(decl.get("needs", ()))
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    takes_all = sig is None or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    accepted = None if takes_all else set(sig.parameters)
    groups = decl.get("groups")
    if groups is None:
        groups = bool(accepted is not None and "group" in accepted)
    call = _UserCall(fn, decl.get("name") or ref, accepted, level)
    doc = (inspect.getdoc(fn) or "").strip().splitlines()
    formula = doc[0] if doc else f"{ref}: your function ({level} level)"
    spec = EstimatorSpec(
        name=ref, level=level, formula=formula, source=f"user function {ref} ({_where(fn)})",
        needs=needs, uses_groups=bool(groups), row_constant=level == "row",
        row_fn=call.rows if level == "row" else None, token_fn=call.tokens if level == "token" else None,
        params={})
    object.__setattr__(spec, "user_fn", fn)  # (register_function: the same object needs no new spec)
    return spec


def _where(fn) -> str:
    """``FILE:LINE, code sha256 HASH`` of a user function: where it is, and which version of its code ran (the
    output's provenance records it)."""
    import hashlib

    try:
        lines, first = inspect.getsourcelines(fn)
        code = hashlib.sha256("".join(lines).encode()).hexdigest()[:12]
        return f"{inspect.getsourcefile(fn)}:{first}, code sha256 {code}"
    except (TypeError, OSError):
        return getattr(fn, "__module__", "?")


def _user_line(exc: BaseException, path: str | None) -> str:
    """'; at FILE:LINE: code' of the last traceback frame in the user's code (not advcli's nor torch's)."""
    frames = traceback.extract_tb(exc.__traceback__)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # advcli/
    ours = [f for f in frames if (path and os.path.abspath(f.filename) == path)
            or not (os.path.abspath(f.filename).startswith(here) or "site-packages" in f.filename
                    or f.filename.startswith("<frozen"))]
    if not ours:
        return ""
    f = ours[-1]
    return f" (at {f.filename}:{f.lineno}: {(f.line or '').strip()})"


class UserExit(Exception):
    """``os._exit(code)`` called by user code while advcli runs it (:func:`user_code` puts this in
    place of ``os._exit``: a process that ends there would end with the user's code, written nothing)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _raising_exit(code=0):
    raise UserExit(code)


_GUARD = threading.Lock()
_guard_depth = 0


_saved: dict = {}


@contextlib.contextmanager
def _guarded():
    """``os._exit`` raising :class:`UserExit` while any user call runs and, under the command line
    (:data:`advcli.errors.COMMAND_OWNS_STDOUT`), ``sys.stdout`` pointing at stderr: counted, since the
    statistics pass calls a token-level function from two threads at once (each restoring what it saw would
    leave stdout on stderr). A library call leaves ``sys.stdout`` alone: swapping it is process-wide, and
    took the prints of the caller's other threads (and a ``redirect_stdout`` ending meanwhile) with it."""
    global _guard_depth
    from .. import errors

    with _GUARD:
        if _guard_depth == 0:
            _saved["exit"] = os._exit
            os._exit = _raising_exit
            if errors.COMMAND_OWNS_STDOUT:
                _saved["stdout"] = sys.stdout
                sys.stdout = sys.stderr
        _guard_depth += 1
    try:
        yield
    finally:
        with _GUARD:
            _guard_depth -= 1
            if _guard_depth == 0:
                os._exit = _saved.pop("exit")
                if "stdout" in _saved:
                    sys.stdout = _saved.pop("stdout")


@contextlib.contextmanager
def user_code(what: str, path: str | None = None, hint: str | None = None):
    """User code run inside a command (a user estimator's import or call):

    - ``sys.exit(n)`` / ``raise SystemExit`` and ``os._exit(n)`` cannot end the run (as a success
      with nothing written, or with the user's exit code): they are refused like any error, exit 2,
      naming the function and the line;
    - what it prints goes to stderr, never into stdout (``--json``, a pipe reading the report).

    ``os._exit`` is replaced for the call's duration (in this process): a user function that
    kills the process another way (``os.kill(os.getpid(), 9)``, a C extension's ``exit()``) still
    ends it, with no output written (docs/errors.md)."""
    try:
        with _guarded():
            yield
    except AdvcliError:
        raise
    except (SystemExit, UserExit) as e:
        call = "os._exit" if isinstance(e, UserExit) else "sys.exit"
        raise AdvcliError(f"{what}: it called {call}({e.code!r}){_user_line(e, path)}; a user function cannot end "
                          "the run: nothing was written",
                          hint=hint or "raise an exception to refuse the data, or return the advantages") from None
    except Exception as e:  # noqa: BLE001 (user code: any error becomes one message, exit 2)
        raise AdvcliError(f"{what} with {type(e).__name__}: {e}{_user_line(e, path)}", hint=hint) from None


class _UserCall:
    """The user function called the way its level says, its output checked (the spec's row_fn/token_fn)."""

    def __init__(self, fn: Callable, name: str, accepted: set | None, level: str):
        self.fn, self.name, self.accepted, self.level = fn, name, accepted, level

    def _call(self, kwargs: dict, rows_desc: str):
        if self.accepted is not None:
            kwargs = {k: v for k, v in kwargs.items() if k in self.accepted}
        with user_code(f"estimator {self.name} failed on {rows_desc}",
                       hint="the arguments it receives are listed in docs/api.md (your own estimator)"):
            return self.fn(**kwargs)

    def rows(self, table, params: dict):
        """row_fn: one call per step; A [R] in input order."""
        import torch

        out = torch.empty_like(table.score)
        scopes = table.scopes
        for s in range(scopes.num_groups):
            idx = torch.nonzero(scopes.codes == s, as_tuple=True)[0]
            if idx.numel() == 0:
                continue
            kw = {"rewards": table.score[idx].clone(), "lengths": table.valid_len[idx].clone(), "step": s}
            if table.groups is not None:
                kw["group"] = torch.unique(table.groups.codes[idx], return_inverse=True)[1]
            desc = f"step {s} (rows {int(idx[0])}..{int(idx[-1])})"
            adv = self._call(kw, desc)
            adv = self._check(adv, (idx.numel(),), desc, lambda i, idx=idx: int(idx[i]), None)
            out[idx] = adv.to(out.dtype)
        return out

    def tokens(self, chunk, params: dict):
        """token_fn: one call per chunk on right-padded [B, T] tensors; flat (advantages, returns)."""
        import torch

        lay = chunk.layout
        B, lengths = lay.num_rows, lay.lengths
        T = int(lengths.max()) if B else 0
        ri, pos = lay.row_index, lay.position

        def pad(flat):
            x = torch.zeros((B, T), dtype=flat.dtype, device=flat.device)
            x[ri, pos] = flat
            return x

        mask = pad(chunk.mask)
        tlr = pad(chunk.token_rewards)
        kw = {"token_rewards": tlr, "mask": mask, "rewards": tlr.sum(-1), "lengths": mask.sum(-1).to(torch.int64)}
        if "group" in chunk.rows:
            kw["group"] = chunk.rows["group"]
        for role, flat in chunk.tokens.items():
            if role in TOKEN_ROLES:
                kw[role] = pad(flat.to(chunk.mask.dtype))
        row0 = int(chunk.rows["row"][0]) if B else 0
        desc = f"rows {row0}..{row0 + B - 1}"
        got = self._call(kw, desc)
        ret = None
        if isinstance(got, tuple) and len(got) == 2:
            got, ret = got
        valid = torch.arange(T, device=mask.device)[None, :] < lengths.to(mask.device)[:, None]
        adv = self._check(got, (B, T), desc, lambda i: row0 + i, valid)[ri, pos].to(chunk.mask.dtype)
        if ret is None:
            return adv, adv
        ret = self._check(ret, (B, T), desc + " (returns)", lambda i: row0 + i, valid)[ri, pos]
        return adv, ret.to(chunk.mask.dtype)

    def _check(self, out, shape: tuple, desc: str, row_of: Callable[[int], int], valid):
        """``out`` as a checked tensor: the shape the level asks for, floating, finite (on ``valid``)."""
        import torch

        what = f"estimator {self.name} on {desc}"
        if not isinstance(out, torch.Tensor):
            raise AdvcliError(f"{what}: returned {type(out).__name__}; expected a torch tensor of shape "
                              f"{list(shape)}", hint="return torch.Tensor advantages (one per row for level='row', "
                                                     "[B, T] for level='token')")
        if tuple(out.shape) != shape:
            raise AdvcliError(f"{what}: returned shape {list(out.shape)}; expected {list(shape)} "
                              f"({'one advantage per row' if len(shape) == 1 else 'rows × tokens, like mask'})")
        if not out.dtype.is_floating_point:
            raise AdvcliError(f"{what}: returned dtype {out.dtype}; expected a floating tensor (float32 or float64)",
                              hint="e.g. return adv.float()")
        bad = ~torch.isfinite(out.detach())
        if valid is not None:
            bad = bad & valid
        if bool(bad.any()):
            first = int(torch.nonzero(bad.reshape(shape[0], -1).any(-1), as_tuple=True)[0][0])
            val = out.detach().reshape(shape[0], -1)[first][bad.reshape(shape[0], -1)[first]][0].item()
            raise AdvcliError(f"{what}: returned {val} (not finite) at row {row_of(first)}; "
                              f"{int(bad.sum())} non-finite value(s) in all",
                              hint="guard divisions (e.g. std + eps) and groups of one row")
        return out.detach()

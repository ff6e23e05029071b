"""A trainer's dump on object storage (``s3://bucket/exp/rollout_data/``): its files copied into the input edge's
temporary directory, under their keys' own paths, and read from there as a local dump is; every message, summary
and provenance names the objects (:func:`uri_of`).

The dump readers read local files (JSON Lines line by line, ``torch.load``, pickles), so the files a dump is made of
are copied down whole, once per command: a prefix (or glob, or object) holding a dump's data file (JSON Lines,
``.pt``, ``.pkl``, a Parquet file a format names: ``completions_{step}.parquet``; any with ``--from FORMAT``) has
every data file under it copied, as a local directory's files are all read, and the ``config.yaml`` files a
trainer saves beside them (AReaL's trial configuration). A Parquet input that no format names is read in place,
by ranged reads (advcli's own layout, an advcli output, a converted dump)."""
from __future__ import annotations

import fnmatch
import os
import shutil

from ..io import remote

MIRRORED: dict[str, str] = {}  # local root of a copied dump -> the URI it stands for
CONFIG_NAMES = ("config.yaml",)  # files a trainer saves beside its dump that a format reads (Format.run_config)


def _dump_keys(spec: str, forced) -> tuple[list, str, str | None] | None:
    """(the store's FileInfo of each file of the dump ``spec`` names, the key ``spec`` stands for (the object, the
    prefix, the glob's folder), the glob (None for one object, '' for a prefix)) when ``spec`` is a trainer's
    dump on object storage; None when it is not one (a Parquet file or prefix of advcli's own layout, or
    nothing there: the Parquet reader says so)."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    from .discovery import DATA_SUFFIXES, _named_by

    def named(path: str) -> bool:
        return any(f.name != "parquet" for f in _named_by(path))

    def data(path: str) -> bool:  # a file a dump is made of
        return path.endswith(DATA_SUFFIXES) and (forced is not None or named(path) or not path.endswith(".parquet"))

    has_glob = any(ch in spec for ch in "*?[")
    parent, _, pattern = spec.rstrip("/").rpartition("/") if has_glob else (spec, "", "")
    fs, root = remote.filesystem_of(parent)
    try:
        info = fs.get_file_info(root)
        if info.type == pafs.FileType.File and not has_glob:
            return ([info], root, None) if data(root) else None
        if info.type != pafs.FileType.Directory:
            return None
        listed = fs.get_file_info(pafs.FileSelector(root, recursive=not has_glob, allow_not_found=True))
    except (OSError, pa.ArrowException) as e:  # (GCS's permanent errors are ArrowException, not OSError)
        raise remote.unreachable(spec, e) from None
    files = [i for i in listed if i.type == pafs.FileType.File]
    if has_glob:
        files = [i for i in files if fnmatch.fnmatchcase(i.base_name, pattern)]
    if not any(data(i.path) for i in files):
        return None
    # every data file, as a local dump's directory is read (its reader decides what each is), and the configs
    return [i for i in files if i.path.endswith(DATA_SUFFIXES) or i.base_name in CONFIG_NAMES], root, pattern


def mirror(spec: str, forced, into: str) -> str | None:
    """``spec`` (a URI) as a local path under ``into`` when it is a trainer's dump on object storage: its files
    copied there (a file, the prefix's folder, or the glob in that folder); None when it is not one."""
    if not remote.is_uri(spec):
        return None
    found = _dump_keys(spec, forced)
    if found is None:
        return None
    import pyarrow as pa

    infos, root, pattern = found
    fs, _ = remote.filesystem_of(spec)
    bucket_root = os.path.join(into, remote.bucket_of(spec).split("://", 1)[1])
    for info in infos:
        dst = os.path.join(into, info.path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            with fs.open_input_stream(info.path) as src, open(dst, "wb") as out:
                shutil.copyfileobj(src, out, remote.COPY_CHUNK)
        except (OSError, pa.ArrowException) as e:
            raise remote.unreachable(remote.uri_in_store_of(spec, info.path), e, "read") from None
    MIRRORED[bucket_root] = remote.bucket_of(spec)
    return os.path.join(into, root, pattern) if pattern else os.path.join(into, root)


def uri_of(text: str) -> str:
    """``text`` with each copied dump's local paths written as the objects they were copied from."""
    for local, uri in MIRRORED.items():
        if local in text:
            text = text.replace(local, uri)
    return text


"""Inputs and outputs on object storage (``s3://``, ``gs://``, ``hdfs://``, any filesystem pyarrow knows).

A path with a URI scheme goes through :mod:`pyarrow.fs`; credentials and endpoint come from the
standard environment as pyarrow reads them (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL_S3`` for an S3-compatible store; Google's
application default credentials for ``gs://``; ``HADOOP_HOME``/``CLASSPATH`` for HDFS). Local paths
never come here.

Reading is ranged: a Parquet file is opened as a random-access file on the store, so a run reads the
footer and then only the column chunks it needs, page by page (:mod:`advcli.io.reader`), never the
whole object first.

Writing is atomic: the output is written to a local temporary file (as for a local output), and
only when it is complete and checked it is uploaded to a temporary key at the bucket's top level
(beside the target where the top level is not writable: deleting it then leaves a zero-byte marker of
the target's "directory", apache/arrow#36275), copied onto the target key by the store (a single
server-side copy: the target appears whole or not at all, and an existing target is replaced only
then), and the temporary key is deleted. An interrupted or failed run leaves neither the target nor a
temporary key (the temporary key is deleted on the way out; only a process killed during its upload
can leave one, named ``.NAME.HASH.advcli-tmp-PID``, which the next run to that target removes).
"""
from __future__ import annotations

import fnmatch
import os
import re
from datetime import timedelta
from functools import lru_cache

from ..errors import AdvcliError
from .temps import TMP_TAG, owner_tag, pid_alive

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
COPY_CHUNK = 8 << 20  # bytes per write of an upload (the store's multipart part size is its own)


def is_uri(path: str) -> bool:
    """True for ``scheme://...`` paths other than ``file://`` (those are local files)."""
    m = _SCHEME.match(str(path))
    return bool(m) and m.group(1).lower() != "file"


def local_path(path: str) -> str:
    """``file:///x`` -> ``/x``; other paths unchanged."""
    p = str(path)
    return p[len("file://"):] if p.lower().startswith("file://") else p


def _environment(scheme: str) -> tuple:
    """What of the environment a store's filesystem is made from (its endpoint, region, retry limit): part of the
    cache's key, so that a process whose environment changed (a library session, tests) does not reuse a
    filesystem made for another endpoint."""
    names = {"s3": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION",
                    "AWS_ACCESS_KEY_ID", "AWS_PROFILE"),
             "gs": ("ADVCLI_GCS_RETRY_SECONDS", "GOOGLE_APPLICATION_CREDENTIALS"),
             "gcs": ("ADVCLI_GCS_RETRY_SECONDS", "GOOGLE_APPLICATION_CREDENTIALS")}.get(scheme, ())
    return tuple(os.environ.get(n) for n in names)


@lru_cache(maxsize=16)
def _filesystem(scheme: str, authority: str, environment: tuple = ()):
    import pyarrow.fs as pafs

    if scheme == "s3":
        # pyarrow reads the credentials and region from the environment; the endpoint of an
        # S3-compatible store (MinIO, Ceph, a local test server) from AWS_ENDPOINT_URL[_S3]
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        kwargs = {}
        if endpoint:
            m = _SCHEME.match(endpoint)
            kwargs["endpoint_override"] = endpoint[m.end():] if m else endpoint
            kwargs["scheme"] = m.group(1) if m else "https"
        if os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"):
            kwargs["region"] = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return pafs.S3FileSystem(**kwargs)
    if scheme in ("gs", "gcs"):
        # google-cloud-cpp retries a failing request (no credentials, an unreachable store) for 15 minutes by
        # default, in native code where Ctrl-C and SIGTERM wait for it: bounded as S3's few retries are
        return pafs.GcsFileSystem(retry_time_limit=timedelta(seconds=gcs_retry_seconds()))
    fs, _ = pafs.FileSystem.from_uri(f"{scheme}://{authority}/")
    return fs


def gcs_retry_seconds() -> float:
    """How long a gs:// request is retried before advcli gives up: ``ADVCLI_GCS_RETRY_SECONDS``, default 20."""
    raw = os.environ.get("ADVCLI_GCS_RETRY_SECONDS", "20")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise AdvcliError(f"ADVCLI_GCS_RETRY_SECONDS={raw!r}: expected a number of seconds > 0",
                          hint="unset it for the default, 20 s")
    return value


def check_key(uri: str, key: str) -> None:
    """A key with an empty, ``.`` or ``..`` part is refused: stores take keys as written while paths
    elsewhere collapse them, so ``s3://b/./in/x`` could name another object than the one compared, or
    (pyarrow) none at all."""
    stem = key.rstrip("/")  # a trailing "/" names a prefix
    odd = next((p for p in stem.split("/") if p in ("", ".", "..")), None) if stem else None
    if odd is not None:
        what = "an empty part (//)" if odd == "" else f"a {odd!r} part"
        raise AdvcliError(f"{uri}: the key has {what}; object stores take a key as it is written",
                          hint="write the key without '//', './' or '../', e.g. s3://bucket/dir/file.parquet")


def filesystem_of(uri: str):
    """(pyarrow filesystem, path inside it) of a URI; an error naming the URI if pyarrow cannot
    reach that kind of store."""
    m = _SCHEME.match(uri)
    scheme = m.group(1).lower()
    rest = uri[m.end():]
    authority, _, key = rest.partition("/")
    check_key(uri, key)
    try:
        fs = _filesystem(scheme, authority, _environment(scheme))
    except AdvcliError:
        raise
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for an unknown or unbuilt scheme
        hint = ("advcli reaches object stores through pyarrow.fs: s3://, gs://, hdfs:// (with its libraries), "
                "or a local path")
        if scheme in ("hdfs", "viewfs"):
            hint = ("hdfs:// needs Hadoop's client library and a Java runtime: set JAVA_HOME, HADOOP_HOME and "
                    "CLASSPATH (`$HADOOP_HOME/bin/hadoop classpath --glob`), or ARROW_LIBHDFS_DIR to the folder "
                    "holding libhdfs.so")
        raise AdvcliError(f"{uri}: cannot open a filesystem for {scheme}:// ({str(e).splitlines()[0]})",
                          hint=hint) from None
    return fs, f"{authority}/{key}" if key else authority


def uri_in_store_of(scheme_of: str, path: str) -> str:
    """``path`` inside a filesystem (``bucket/key``, as :func:`filesystem_of` gives it) as a URI of the same
    kind of store as the URI ``scheme_of``."""
    scheme = _SCHEME.match(scheme_of).group(1)
    return f"{scheme}://{path}"


def reach_hint(uri: str) -> str:
    """What to check when a store cannot be reached, for that kind of store."""
    if uri.lower().startswith(("gs://", "gcs://")):
        return ("check the URI and Google's credentials (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth "
                "application-default login`); ADVCLI_GCS_RETRY_SECONDS sets how long a request is retried (20)")
    return "check the URI, the credentials (AWS_ACCESS_KEY_ID, ...) and the endpoint (AWS_ENDPOINT_URL)"


# the store's words for credentials it refused (S3's error codes as pyarrow names them, GCS's status)
_REFUSED = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "AccessDenied",
            "InvalidAccessKeyId", "SignatureDoesNotMatch", "PERMISSION_DENIED", "UNAUTHENTICATED", "HTTP 403")


def unreachable(uri: str, e: BaseException, verb: str = "reach") -> AdvcliError:
    """The message for a store that answered ``e`` about ``uri``: refused credentials said as such (the
    store answered, so the endpoint is right), anything else as a store that could not be reached."""
    first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
    if any(word in first for word in _REFUSED):
        if uri.lower().startswith(("gs://", "gcs://")):
            who = "Google's credentials (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth application-default login`)"
        else:
            who = "the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
        return AdvcliError(f"{uri}: the store refused access ({first})",
                           hint=f"check {who}, and that they may read the input's bucket and write the output's")
    return AdvcliError(f"{uri}: cannot {verb} it ({first})", hint=reach_hint(uri))


def _info(uri: str):
    import pyarrow as pa

    fs, path = filesystem_of(uri)
    try:
        return fs, path, fs.get_file_info(path)
    except (OSError, pa.ArrowException) as e:  # GCS's permanent errors are ArrowException, not OSError
        raise unreachable(uri, e) from None


def exists(uri: str) -> bool:
    import pyarrow.fs as pafs

    return _info(uri)[2].type != pafs.FileType.NotFound


def is_dir(uri: str) -> bool:
    import pyarrow.fs as pafs

    return _info(uri)[2].type == pafs.FileType.Directory


def bucket_of(uri: str) -> str:
    """``scheme://bucket`` of a URI (of a nested key too, not only of a top one)."""
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def expand(spec: str) -> list[str]:
    """The Parquet files of one input URI: the object itself, every ``*.parquet`` directly under a
    prefix ("directory"), or the objects matching a glob in its last part, sorted by name."""
    import pyarrow.fs as pafs

    has_glob = any(ch in spec for ch in "*?[")
    if not has_glob:
        fs, path, info = _info(spec)
        if info.type == pafs.FileType.File:
            return [spec]
        if info.type == pafs.FileType.NotFound:
            bucket = bucket_of(spec)
            if bucket.rstrip("/") != spec.rstrip("/") and not exists(bucket):
                raise AdvcliError(f"{spec}: the bucket {bucket} does not exist (or these credentials cannot see it)",
                                  hint="check the bucket's name, and the endpoint and credentials in the environment")
            raise AdvcliError(f"{spec}: no such object", hint="check the URI; INPUT may be an object, a prefix "
                                                              "(directory) or a glob")
        found = _list(fs, path, "*.parquet")
        if not found:
            raise AdvcliError(f"{spec}: directory holds no *.parquet files")
        return [uri_in_store_of(spec, p) for p in found]
    parent, _, pattern = spec.rstrip("/").rpartition("/")
    if any(ch in parent for ch in "*?["):
        raise AdvcliError(f"{spec}: a glob on object storage may only be in the last part of the path",
                          hint="e.g. s3://bucket/run/step_*.parquet")
    fs, path, info = _info(parent)
    found = _list(fs, path, pattern) if info.type == pafs.FileType.Directory else []
    if not found:
        raise AdvcliError(f"{spec}: no object matches this pattern")
    return [uri_in_store_of(spec, p) for p in found]


def _list(fs, path: str, pattern: str) -> list[str]:
    import pyarrow.fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File and fnmatch.fnmatchcase(i.base_name, pattern))


def open_input(uri: str):
    """A random-access file on the store (ranged reads)."""
    import pyarrow as pa

    fs, path = filesystem_of(uri)
    try:
        return fs.open_input_file(path)
    except FileNotFoundError:
        raise AdvcliError(f"{uri}: no such object") from None
    except (OSError, pa.ArrowException) as e:
        raise unreachable(uri, e, "open") from None


def file_info(uri: str):
    """The store's FileInfo of one object (size, mtime); a missing object refused."""
    import pyarrow.fs as pafs

    info = _info(uri)[2]
    if info.type == pafs.FileType.NotFound:
        raise AdvcliError(f"{uri}: no such object (it was there when the run started)")
    return info


def size(uri: str) -> int:
    return int(_info(uri)[2].size or 0)


def temp_key(target: str) -> str:
    parent, _, name = target.rpartition("/")
    return f"{parent}/.{name}{TMP_TAG}{owner_tag()}"


def _top_pattern(target: str) -> tuple[str, str]:
    """(the bucket's URI, the name pattern of ``target``'s temporary keys at its top level)."""
    import hashlib

    m = _SCHEME.match(target)
    bucket = target[m.end():].split("/", 1)[0]
    name = target.rstrip("/").rsplit("/", 1)[-1]
    tag = hashlib.sha256(target.encode()).hexdigest()[:12]
    return f"{m.group(0)}{bucket}", f".{name}.{tag}{TMP_TAG}"


def top_temp_key(target: str) -> str:
    """The temporary key of an upload at the bucket's top level. Deleting a key makes pyarrow's S3
    filesystem put a zero-byte marker for its parent "directory" (``out/``, apache/arrow#36275); a key
    directly under the bucket has none to leave."""
    bucket, prefix = _top_pattern(target)
    return f"{bucket}/{prefix}{owner_tag()}"


def put_file(fs, local: str, key: str) -> None:
    """Stream the local file ``local`` to ``key`` of ``fs`` (one multipart upload on an object store:
    the object appears when complete)."""
    with open(local, "rb") as src, fs.open_output_stream(key) as out:
        while True:
            block = src.read(COPY_CHUNK)
            if not block:
                break
            out.write(block)


def upload(local: str, target: str) -> None:
    """Put the complete local file ``local`` at ``target`` atomically (module docstring)."""
    fs, dst = filesystem_of(target)
    tmps = [filesystem_of(top_temp_key(target))[1]]
    try:
        try:
            try:
                put_file(fs, local, tmps[0])
            except OSError:  # no write access at the bucket's top level: beside the target, then
                tmps.append(filesystem_of(temp_key(target))[1])
                put_file(fs, local, tmps[-1])
            fs.copy_file(tmps[-1], dst)  # server-side: the target appears whole
        except OSError as e:
            raise AdvcliError(f"{target}: upload failed ({str(e).splitlines()[0]}); nothing was written there",
                              hint="check the credentials, the endpoint and that the bucket exists") from None
    finally:
        for tmp in tmps:
            try:
                fs.delete_file(tmp)
            except OSError:
                pass


def clean_stale_temps(target: str) -> list[str]:
    """Remove temporary keys of earlier runs for ``target`` whose process is gone on this machine
    (keys of live processes, or of other machines' runs that happen to share a PID, are kept when
    the PID is alive here)."""
    parent, _, name = target.rpartition("/")
    bucket, top = _top_pattern(target)
    removed = []
    for where, pattern in ((parent, f".{name}{TMP_TAG}*"), (bucket, f"{top}*")):
        removed += _clean(target, where, pattern)
    return removed


def _clean(target: str, where: str, pattern: str) -> list[str]:
    fs, path = filesystem_of(where)
    removed = []
    try:
        for p in _list(fs, path, pattern):
            try:
                pid = int(p.rsplit(TMP_TAG, 1)[1].split("-", 1)[0])  # PID, or PID-TID (a library call's thread)
            except ValueError:
                continue
            if pid != os.getpid() and not pid_alive(pid):
                fs.delete_file(p)
                removed.append(uri_in_store_of(target, p))
    except OSError:
        pass
    return removed


def check_output(target: str, inputs: list[str], force: bool) -> None:
    """The checks of :func:`advcli.io.writer.check_output_path` for a URI output: not an input, not a
    prefix with objects under it, and --force to replace an existing object. The bucket must exist:
    advcli never creates one."""
    if any(str(p).rstrip("/") == target.rstrip("/") for p in inputs):
        raise AdvcliError(f"{target}: the output path is an input file; advcli never overwrites its input",
                          hint="choose another --output path")
    if target.endswith("/"):  # one object to write (a directory output's objects are named before this check)
        bare = target.rstrip("/")
        raise AdvcliError(f"{target}: names a prefix (the trailing /); this command writes one object",
                          hint=f"give an object key, e.g. -o {bare}/out.parquet or -o {bare}.parquet")
    bucket = bucket_of(target)
    if not exists(bucket):
        raise AdvcliError(f"{target}: the bucket {bucket} does not exist", hint="create it first; advcli never "
                                                                                "creates buckets")
    if is_dir(target):
        raise AdvcliError(f"{target}: is a directory (a prefix with objects under it); give an object key")
    if exists(target) and not force:
        raise AdvcliError(f"{target}: already exists", hint="pass --force to replace it")
    writable_temp_key(target)


def writable_temp_key(target: str) -> str:
    """The URI of ``target``'s temporary key where the credentials may write: an empty key is written and
    deleted at the bucket's top level (:func:`top_temp_key`: no zero-byte parent marker is left behind), else
    beside the target (:func:`temp_key`). Called before any work (by :func:`upload`'s check and the Ray
    engine's output prefix): a store that refuses writes (credentials without write permission, a read-only
    bucket) is found now, not after the computation. The probe's name is a temporary key's (a killed run's is
    cleaned like one)."""
    errors = []
    for key_uri in (top_temp_key(target), temp_key(target)):
        fs, key = filesystem_of(key_uri)
        try:
            with fs.open_output_stream(key) as out:
                out.write(b"")
        except OSError as e:
            errors.append(str(e).splitlines()[0])
            continue
        try:
            fs.delete_file(key)
        except OSError:
            pass
        return key_uri
    raise AdvcliError(f"{target}: cannot write there ({errors[-1]}); nothing was computed",
                      hint="check the credentials' write permission on the bucket (checked before any work)")

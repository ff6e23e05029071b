"""Services the tests start themselves on this machine and stop afterwards: a local S3-compatible
server (moto, on 127.0.0.1) and a local Ray instance. Shared by tests/formats/test_object_storage.py,
tests/distributed/test_ray.py and tests/distributed/test_ray_parity.py."""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest


@contextmanager
def local_s3_server(log_dir, bucket: str = "bkt", open_requests: int | None = None):
    """A moto S3 server on a free port of 127.0.0.1 with one bucket; the AWS_* variables point at it
    (so advcli and subprocesses, Ray workers started afterwards included, reach it) until the server
    stops. Yields a pyarrow S3FileSystem on it. ``open_requests``: the server checks credentials after that
    many requests (moto's INITIAL_NO_AUTH_ACTION_COUNT; it knows no key, so every later request is refused);
    None: it never checks."""
    import pyarrow.fs as pafs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(str(log_dir), "moto.log"), "w")
    server_env = dict(os.environ)
    if open_requests is not None:
        server_env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(open_requests)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=server_env)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="testing",
                               secret_key="testing", region="us-east-1", allow_bucket_creation=True)
        for _ in range(200):  # the server takes a moment to listen
            try:
                fs.create_dir(bucket)
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("the local S3 server did not start")
        yield fs
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        from advcli.io import remote

        remote._filesystem.cache_clear()  # clients made for this server's endpoint


def s3_keys(fs, prefix: str) -> list[str]:
    """Every object under ``prefix``, sorted."""
    import pyarrow.fs as pafs

    return sorted(i.path for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
                  if i.type == pafs.FileType.File)


@contextmanager
def local_ray(block_size: int = 32 * 1024):
    """A new local Ray instance of 2 CPUs (``address="local"``: never one already running on a shared
    machine), with small Ray Data blocks so that the figures span many blocks and batches."""
    import ray

    ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ctx = ray.data.DataContext.get_current()
    saved = ctx.target_max_block_size
    ctx.target_max_block_size = block_size
    try:
        yield ray
    finally:
        ctx.target_max_block_size = saved
        ray.shutdown()


@contextmanager
def local_ray_cluster(block_size: int = 32 * 1024, workers: int = 2):
    """``ray.cluster_utils.Cluster`` on this machine: a head node with no CPU for tasks (the driver's
    node) and ``workers`` worker nodes of one CPU each, separate raylets, with small Ray Data blocks
    so that a run has many batches. Yields ``(cluster, worker_nodes)``."""
    import ray
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1) for _ in range(workers)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    saved = ctx.target_max_block_size
    ctx.target_max_block_size = block_size
    try:
        yield cluster, nodes
    finally:
        ctx.target_max_block_size = saved
        ray.shutdown()
        cluster.shutdown()

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "sample_data", "rollouts.parquet")


def run_cli(*args, cwd=None, env=None):
    """Run ``python -m advcli ARGS`` in a subprocess; returns CompletedProcess (text)."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "advcli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=e)


@pytest.fixture
def sample_path():
    return SAMPLE

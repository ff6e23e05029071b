"""`pytest` ends by telling a newcomer what was skipped and what would run it (issue 45, part 7): the skip
reasons grouped, with counts (tests/conftest.py's pytest_terminal_summary)."""
import os
import subprocess
import sys

from conftest import ROOT


def test_skips_are_summed_up_by_reason(tmp_path):
    (tmp_path / "test_some.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('i', range(3))\n"
        "def test_needs_ray(i):\n    pytest.skip(\"ray is not installed (pip install 'advcli[ray]')\")\n\n"
        "@pytest.mark.skipif(True, reason='needs a CUDA device')\ndef test_gpu():\n    pass\n\n"
        "def test_runs():\n    pass\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests"))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                        str(tmp_path / "test_some.py")], capture_output=True, text=True, cwd=tmp_path, env=env,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if "4 skipped, by reason" in ln)
    assert lines[head + 1].split(None, 1) == ["3", "ray is not installed (pip install 'advcli[ray]')"], r.stdout
    assert lines[head + 2].split(None, 1) == ["1", "needs a CUDA device"], r.stdout

"""docs/configuration.md is generated from advcli.config.SCHEMA, the flavors and the estimators: a key
added without regenerating it fails here (run `python docs/gen_config_doc.py`)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_configuration_doc_is_current():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "gen_config_doc.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr

"""Regenerate the two screenshots of docs/reports.md from the HTML report, rendered by headless Chromium:

    python docs/gen_screenshots.py          # needs chromium on PATH; rewrites the two PNG files

- docs/report-screenshot.png: the top of `advcli run sample_data/rollouts.parquet --report run.html`;
- docs/group-health-screenshot.png: the group-health section of `advcli stats --report` on the GRPO
  output of a 4-step synthetic dump (`advcli sample`) with 0/1 rewards, three data sources and some
  partial groups.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")

# keeps the page's h1 and its group-health section (up to the next h2), removes the rest
ONLY_HEALTH = """<script>
(function () {
  const main = document.querySelector("main");
  let keep = false;
  for (const el of [...main.children]) {
    if (el.tagName === "H2") keep = el.textContent === "Group health";
    if (!keep && el.tagName !== "H1") el.remove();
  }
})();
</script>"""


def advcli(*args: str, cwd: str = ROOT) -> None:
    env = dict(os.environ, ADVCLI_SERVER="off", PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-m", "advcli", *args], check=True, env=env, cwd=cwd, stdout=subprocess.DEVNULL)


def screenshot(page: str, png: str, width: int, height: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs chromium on PATH")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={width},{height}",
                        "file://" + os.path.abspath(page)], check=True, capture_output=True, timeout=120)
    print(f"wrote {os.path.relpath(png, ROOT)}")


def health_dump(tmp: str) -> str:
    """advcli's sample of 4 steps with its 0/1 ``acc`` as the reward, a data source per prompt and about
    3 % of the rows left out (partial groups)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = os.path.join(tmp, "raw.parquet")
    advcli("sample", raw, "--rows", "1536", "--steps", "4", "--max-len", "384")
    t = pq.read_table(raw)
    rng = np.random.default_rng(7)
    sources = np.array(["gsm8k", "math", "code"])
    prompts = t.column("prompt_id").to_pylist()
    source = sources[[sum(p.encode()) % 3 for p in prompts]]
    t = t.set_column(t.schema.get_field_index("reward"), "reward", t.column("acc"))
    t = t.append_column("data_source", pa.array(source.tolist()))
    t = t.filter(pa.array(rng.random(t.num_rows) > 0.03))
    path = os.path.join(tmp, "health.parquet")
    pq.write_table(t, path)
    return path


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_html = os.path.join(tmp, "run.html")  # run where the page shows the paths a user would type
        os.symlink(os.path.join(ROOT, "sample_data"), os.path.join(tmp, "sample_data"))
        advcli("run", "sample_data/rollouts.parquet", "-o", "out.parquet", "--report", "run.html", "-q", cwd=tmp)
        screenshot(run_html, os.path.join(DOCS, "report-screenshot.png"), 1280, 2000)
        out, stats_html = os.path.join(tmp, "grpo.parquet"), os.path.join(tmp, "stats.html")
        advcli("run", health_dump(tmp), "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "-q")
        advcli("stats", out, "--report", stats_html, "-q")
        with open(stats_html, encoding="utf-8") as fh:
            page = fh.read().replace("</body>", ONLY_HEALTH + "</body>")
        trimmed = os.path.join(tmp, "health.html")
        with open(trimmed, "w", encoding="utf-8") as fh:
            fh.write(page)
        screenshot(trimmed, os.path.join(DOCS, "group-health-screenshot.png"), 1240, 1500)


if __name__ == "__main__":
    main()

"""report.html as a person sees it: headless Chromium (Debian's `chromium`) loads the one
file, every embedded plot decodes (natural size > 0), and a screenshot shows the page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from roborl.plugins.report.cli import write_report

CHECK = """
<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images).map(i => ({
    title: i.title, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight }));
  const out = document.createElement('pre');
  out.id = 'img-check';
  out.textContent = JSON.stringify(imgs);
  document.body.appendChild(out);
});
</script>
"""


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium is a system dependency of the test suite (make deps)"
    return path


def _browse(html: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={profile}", *flags, html.resolve().as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def _runs(root: Path) -> None:
    """Two methods on two tasks, with returns in the thousands and in the tens."""
    rs = np.random.RandomState(0)
    for algo, levels in (("sac", (3000.0, 40.0)), ("dsac_t", (3300.0, 55.0))):
        for env, level in zip(("HalfCheetah-v5", "InvertedPendulum-v5"), levels):
            for seed in range(4):
                d = root / f"{algo}_{env}_{seed}"
                d.mkdir(parents=True)
                lines = [
                    {"step": s, "updates": s, "eval/return_mean": level * f + 10 * rs.rand()}
                    for s, f in ((2000, 0.3), (4000, 0.7), (6000, 1.0))
                ]
                (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
                summary = {"algo": algo, "env": env, "seed": seed, "steps": 6000, "updates": 6000}
                (d / "summary.json").write_text(json.dumps(summary))


def test_report_html_renders_in_chromium_with_every_image_loaded(tmp_path: Path) -> None:
    _runs(tmp_path / "runs")
    refs = tmp_path / "refs.yaml"
    refs.write_text(
        "HalfCheetah-v5: {random: -280.0, reference: 3500.0}\n"
        "InvertedPendulum-v5: {random: 5.0, reference: 60.0}\n"
    )
    out = tmp_path / "report"
    result = write_report([tmp_path / "runs"], out, reps=200, refs=refs)
    html = out / "report.html"
    text = html.read_text()
    # one self-contained file: no image is fetched from beside it
    assert not re.search(r"<img[^>]+src='(?!data:image/png;base64,)", text)
    assert text.count("<img") == len(result["images"]) >= 6

    checked = tmp_path / "checked.html"  # the report plus a script that reports each image
    checked.write_text(text.replace("</body>", CHECK + "</body>"))
    dom = _browse(checked, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    match = re.search(r"<pre id=\"img-check\">(.*?)</pre>", dom.stdout, re.S)
    assert match, dom.stdout[-2000:]
    imgs = json.loads(match.group(1).replace("&quot;", '"'))
    assert [i["title"] for i in imgs] == result["images"]
    for img in imgs:  # decoded: a broken image has natural size 0
        assert img["complete"] and img["w"] > 0 and img["h"] > 0, img

    # the check itself sees a broken image (so a pass above means something)
    broken = tmp_path / "broken.html"
    broken.write_text(
        text.replace("<h2>Plots</h2>", "<h2>Plots</h2><img src='data:image/png;base64,AAAA' "
                     "title='broken'>").replace("</body>", CHECK + "</body>")
    )  # fmt: skip
    dom = _browse(broken, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom")
    match = re.search(r"<pre id=\"img-check\">(.*?)</pre>", dom.stdout, re.S)
    assert match, dom.stdout[-2000:]
    bad = [i for i in json.loads(match.group(1).replace("&quot;", '"')) if i["title"] == "broken"]
    assert bad and bad[0]["w"] == 0

    shot = tmp_path / "report.png"
    proc = _browse(html, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1000,1400")
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (1400, 1000)
    assert pixels[..., :3].std() > 0.05  # a page with text and tables, not a blank one

"""The HTML report opens in a real browser (headless Chromium) and every figure in it loads."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import pytest

from reports.render import render
from test_report import HEADER, MEZO_CURVE, ZERO_CURVE, mezo_train, result

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")

# Appended to a copy of the report: once the page has loaded (images included), it writes what the
# browser made of every image into the DOM, which --dump-dom prints.
PROBE = """
<script>
window.addEventListener("load", () => {
  const probe = document.createElement("pre");
  probe.id = "image-probe";
  probe.textContent = JSON.stringify([...document.images].map(image => (
    {alt: image.alt, complete: image.complete, width: image.naturalWidth, height: image.naturalHeight})));
  document.body.appendChild(probe);
});
</script>
"""


def browse(page, profile) -> str:
    """The DOM of `page` (a file, or a URL) after Chromium loaded it, with a throwaway profile and no
    network but loopback."""
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               "--disable-quic", "--virtual-time-budget=10000", "--dump-dom",
               page.as_uri() if isinstance(page, Path) else page]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(BROWSER is None, reason="chromium is not installed (Debian: apt-get install -y chromium; "
                                             "`make test` installs it where apt-get can)")
def test_report_opens_in_chromium_and_its_figures_load(tmp_path):
    results = [result("base", task, 0, (0.0, 0.0, 0.0), ZERO_CURVE) for task in HEADER["tasks"]]
    results += [result("mezo", "gsm8k", 0, (0.125, 0.0, 0.375), MEZO_CURVE, mezo_train(12.0, 900.0))]
    written = render(results, HEADER, tmp_path / "report")
    page = written["report.html"].read_text()
    assert 'src="data:image/png;base64,' in page and not re.search(r'<img[^>]+src="(?!data:)', page), \
        "every figure is embedded: the page must not depend on files beside it"
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"))

    dom = browse(probe, tmp_path / "profile")
    found = re.search(r'<pre id="image-probe">(.*?)</pre>', dom, re.S)
    assert found, "the page did not finish loading in Chromium"
    images = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    figures = sorted(name for name in written if name.endswith(".png"))
    assert len(images) == len(figures) == 3 * 3 + 2  # per task: pass@k, cost, curves; memory; the cluster model
    for image in images:
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image
    # Decoded at the size they were drawn: each figure's pixel width is one of the PNGs' widths.
    widths = {matplotlib.image.imread(written[name]).shape[1] for name in figures}
    assert {image["width"] for image in images} == widths
    assert "nograd report: quickstart" in dom and "Claim checks" in dom

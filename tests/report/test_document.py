"""report.html: the report as one self-contained page beside report.md, its figures embedded.
Checked as text everywhere, and rendered in headless Chromium where one is installed (CI
installs Debian's, .ci/run): every figure must decode at its own size."""

from __future__ import annotations

import base64
import re
import shutil
import struct
import subprocess

import pytest

from dhwt.report.document import to_html, write_document

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(name)), None)
#: Added to a copy of the page: on load, each image records the size it decoded to.
PROBE = """<script>
window.addEventListener("load", () => {
  for (const img of document.images)
    img.setAttribute("data-decoded", img.complete ? img.naturalWidth + "x" + img.naturalHeight
                                                  : "not loaded");
  document.body.setAttribute("data-images", document.images.length);
});
</script>
</body>"""


def png_size(data: bytes) -> str:
    """'WxH' from a PNG's header (IHDR), read here without an image library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return f"{width}x{height}"


def embedded_images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in
            re.findall(r'<img[^>]*src="data:image/png;base64,([^"]+)"', page)]


def test_images_are_embedded_and_the_rest_kept(tmp_path):
    (tmp_path / "figures").mkdir()
    png = (b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">II", 3, 2)
           + b"\x08\x02\x00\x00\x00")
    (tmp_path / "figures" / "a.png").write_bytes(png)
    text = ("# A <b>title</b>\n\n| run | loss |\n|---|---|\n| tied | 0.5 |\n\n"
            "![drawn](figures/a.png)\n\n![gone](figures/missing.png)\n\n"
            "![remote](https://example.org/x.png)\n")
    page = to_html(text, tmp_path)
    assert embedded_images(page) == [png]
    assert 'src="figures/missing.png"' in page and "(missing: figures/missing.png)" in page
    assert 'src="https://example.org/x.png"' in page  # a URI is left as written
    assert "<title>A &lt;b&gt;title&lt;/b&gt;</title>" in page
    assert "<th>run</th>" in page and "<td>0.5</td>" in page
    write_document(tmp_path / "report.md", text)
    assert (tmp_path / "report.md").read_text() == text
    assert (tmp_path / "report.html").read_text() == page


@pytest.fixture(scope="module")
def reports(tmp_path_factory, cli):
    """A run's report and an analyze report over two runs (tied, untied)."""
    root = tmp_path_factory.mktemp("html")
    common = ["--grammar", "parity", "--steps", 60, "--seeds", "1-3", "--eval-every", 20,
              "--snapshot-every", 20]
    for schedule in ("tied", "untied"):
        assert cli(["train", *common, "--tie-schedule", schedule,
                    "--out", root / schedule])[0] == 0
    assert cli(["analyze", root / "tied", root / "untied", "--out", root / "both",
                "--similarity", "none"])[0] == 0
    return [root / "untied" / "report.html", root / "both" / "report.html"]


@pytest.mark.slow  # trains two runs (about 4 s)
def test_each_report_page_holds_its_figures(reports):
    for page_path in reports:
        page = page_path.read_text()
        markdown = page_path.with_suffix(".md").read_text()
        figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
        assert figures and embedded_images(page) == [
            (page_path.parent / f).read_bytes() for f in figures]
        assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from elsewhere


@pytest.mark.slow  # starts a browser
@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium here (CI installs it)")
def test_a_browser_shows_every_figure(reports, tmp_path):
    for n, page_path in enumerate(reports):
        probe = tmp_path / f"page{n}.html"  # a copy: the report itself stays as written
        probe.write_text(page_path.read_text().replace("</body>", PROBE))
        result = subprocess.run(
            [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
             "--dump-dom", probe.as_uri()],
            capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        expected = [png_size(data) for data in embedded_images(page_path.read_text())]
        assert f'data-images="{len(expected)}"' in result.stdout
        assert re.findall(r'data-decoded="([^"]+)"', result.stdout) == expected

"""prep report opened in a real browser: headless Chromium (Debian's chromium and
chromium-driver; `make test` installs them where apt-get can) driven by Selenium, from a
file:// URL. No console error, every image decoded (naturalWidth > 0), every section there, a
screenshot that is not one colour, and nothing fetched from a network.

The same checks are first run on a page broken on purpose, so that they are known to see a
broken image and a console error."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import one_colour_share
from PIL import Image

from prep.inspect.htmlreport import write_report
from prep.inspect.preview import BLANK_SHARE

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None or DRIVER is None,
        reason="no chromium/chromedriver: apt-get install chromium chromium-driver (make test "
        "does where apt-get works)",
    ),
]
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",  # a container's 64 MB /dev/shm crashes a tab; /tmp instead
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,2000",
)
STATE = """
const imgs = [...document.images];
return {
  ready: document.readyState === "complete" && imgs.every(i => i.complete),
  images: imgs.length,
  broken: imgs.filter(i => !(i.naturalWidth > 0)).map(i => i.alt),
  sections: [...document.querySelectorAll("section")].map(s => s.id),
  svgs: document.querySelectorAll("section svg").length,
  fetched: performance.getEntriesByType("resource").map(r => r.name)
    .filter(n => !n.startsWith("data:")),
};
"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import os

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager never looks for a driver online
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the dev extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def opened(driver: Any, page: Path) -> tuple[dict[str, Any], list[str], np.ndarray]:
    """The page's state once loaded, its console errors, and a screenshot (H, W, 3)."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(STATE)["ready"])
    state = driver.execute_script(STATE)
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    shot = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
    return state, errors, np.asarray(shot)


def test_the_checks_see_a_broken_page(browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><body><section id="a"></section>'
        '<img src="data:image/jpeg;base64,AAAA" alt="bad">'
        "<script>throw new Error('broken on purpose')</script></body></html>"
    )
    state, errors, shot = opened(browser, page)
    assert state["broken"] == ["bad"]
    assert any("broken on purpose" in e for e in errors)
    assert one_colour_share(shot) > BLANK_SHARE  # blank by the measure the report is held to


def test_report_in_chromium(browser: Any, packed: Path, tmp_path: Path) -> None:
    page = write_report(packed, tmp_path / "report.html", per_class=2)
    state, errors, shot = opened(browser, page)
    assert errors == []
    text = Path(page).read_text()
    samples = text.split('<section id="samples"')[1].split("</section>")[0]
    assert samples.count('<img src="data:image/jpeg') == 8  # 4 classes, 2 a class
    assert state["images"] == text.count('<img src="data:image/') and state["broken"] == []
    assert {"counts", "sizes", "samples", "stats", "rejects", "fields"} <= set(state["sections"])
    assert state["svgs"] >= 3  # the charts drew
    assert state["fetched"] == []  # nothing from outside the file
    assert shot.shape[1] == 1280 and one_colour_share(shot) < BLANK_SHARE  # not blank

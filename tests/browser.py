"""Headless Chromium for the console and /docs tests and bench/console_screenshots.py: Debian's
chromium and chromium-driver (no browser download), driven by Selenium. The performance log records
every URL the page requests, so a test can check that nothing left the machine."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def missing() -> str | None:
    """Why no browser can run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (path.is_file() or shutil.which(path.name)):
            return f"{path} is not installed (apt-get install -y chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    return None


def chromium(width: int = 1280, height: int = 1000) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM if CHROMIUM.is_file() else shutil.which("chromium"))
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = str(CHROMEDRIVER if CHROMEDRIVER.is_file() else shutil.which("chromedriver"))
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return webdriver.Chrome(options=options, service=Service(driver, env=env))


def requested_urls(driver: Any) -> list[str]:
    """Every URL the browser requested since the last call (the performance log is drained by reading)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls

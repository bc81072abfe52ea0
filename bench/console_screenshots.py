"""Screenshots of the operator console and /docs, from a real `ragsync serve` in headless Chromium.

    RAGSYNC_EMBED_MODEL_PATH=... python3 bench/console_screenshots.py [--out bench/results/console]

Builds the demo drive in a temporary home, syncs it, revokes the HR folder and deletes the salaries
file (so propagation and deletion pages have records), then saves one PNG per page and a JSON index
of what was shot, with the hosts every page requested (only 127.0.0.1 is expected).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from browser import chromium, missing, requested_urls  # noqa: E402
from serving import Serve, cli, environment, token  # noqa: E402

from ragsync.demo import build_drive  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/console")
    args = parser.parse_args()
    why = missing()
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    shots: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="ragsync-console-") as tmp:
        drive = Path(tmp) / "drive"
        build_drive(drive)
        env = environment(Path(tmp) / "home")
        with Serve(env) as serve:
            cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
            (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
            cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
            (drive / "acme/hr/salaries.md").unlink()
            cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
            serve.wait_drained()
            key = json.loads((serve.home / "operator.key").read_text())["key"]
            driver = chromium(1280, 1100)
            try:

                def shoot(name: str, wait_css: str) -> None:
                    WebDriverWait(driver, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, wait_css)))
                    time.sleep(0.3)
                    path = args.out / f"{name}.png"
                    driver.save_screenshot(str(path))
                    hosts = sorted({urlsplit(u).hostname or "" for u in requested_urls(driver)} - {""})
                    shots.append(
                        {
                            "page": name,
                            "url": driver.current_url,
                            "file": str(path.relative_to(ROOT)),
                            "hosts_requested": hosts,
                        }
                    )

                driver.get(f"{serve.api}/console")
                shoot("01-unauthenticated", "input[name=key]")
                driver.get(f"{serve.api}/console/login")
                driver.find_element(By.NAME, "key").send_keys(key)
                driver.find_element(By.CSS_SELECTOR, "form button").click()
                shoot("02-overview", "table.sources")
                driver.get(f"{serve.api}/console/propagation")
                shoot("03-propagation", "svg.histogram")
                driver.get(f"{serve.api}/console/deletions")
                shoot("04-deletions", "table.deletions")
                driver.find_element(By.LINK_TEXT, "certificate").click()
                shoot("05-certificate", ".certificate")
                driver.get(f"{serve.api}/console/ask")
                driver.find_element(By.NAME, "token").send_keys(token("acme", "ann", "staff"))
                driver.find_element(By.NAME, "question").send_keys(
                    "How many days do customers have to request a refund?"
                )
                driver.find_element(By.CSS_SELECTOR, "main form button").click()
                shoot("06-ask", "section.answer")
                driver.get(f"{serve.api}/docs")
                shoot("07-docs", ".swagger-ui .opblock")
            finally:
                driver.quit()
    (args.out / "screenshots.json").write_text(json.dumps(shots, indent=2) + "\n")
    for shot in shots:
        print(f"{shot['file']}  hosts: {', '.join(shot['hosts_requested'])}")  # type: ignore[arg-type]
    outside = [s for s in shots if set(s["hosts_requested"]) - {"127.0.0.1"}]  # type: ignore[arg-type]
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())

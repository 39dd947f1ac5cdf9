"""The dashboard's screenshots in README.md (docs/dashboard-*.png): a live 3-node cluster
of this checkout with a few queues and some traffic, shown in headless Chromium
through Playwright (as tests/browser does), 1280x800.

    python docs/screenshots.py [--seconds 150]

Traffic runs for `--seconds` before the first shot, so that the charts have minutes of
samples. Writes docs/dashboard-queues.png and docs/dashboard-cluster.png.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support import DisqProcess, form_cluster, free_port  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# queue -> (jobs added per second, share of them consumed)
TRAFFIC = {"orders": (40, 0.98), "emails": (25, 1.0), "thumbnails": (12, 0.8),
           "webhooks": (6, 1.0)}


def traffic(nodes: list[DisqProcess], stop: threading.Event) -> None:
    clients = [node.client() for node in nodes]
    tick = 0
    while not stop.is_set():
        tick += 1
        swing = 1 + 0.6 * ((tick // 40) % 2)  # every 10 s, a busier stretch
        for queue, (rate, drained) in TRAFFIC.items():
            client = random.choice(clients)
            count = max(0, round(random.gauss(rate * swing / 4, 2)))
            for _ in range(count):
                client.execute_command("ADDJOB", queue, json.dumps(
                    {"id": random.randint(1, 10**6)}), 0, "RETRY", 30)
            want = round(count * drained + random.random())
            if want:
                for job in client.execute_command(
                        "GETJOB", "NOHANG", "COUNT", want, "FROM", queue) or []:
                    client.execute_command("ACKJOB", job[1])
        time.sleep(0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        ports = [free_port() for _ in range(3)]
        nodes = [DisqProcess(Path(tmp) / f"n{i}", "--http-port", str(port))
                 for i, port in enumerate(ports)]
        stop = threading.Event()
        loader: threading.Thread | None = None
        try:
            form_cluster([node.start() for node in nodes])
            first = nodes[0].client()
            first.execute_command("QPOLICY", "emails", "SET", "MAXDELIVERIES", 2)
            for i in range(4):
                first.execute_command("ADDJOB", "emails", f"bounced {i}", 0)
            for _ in range(2):
                for job in first.execute_command("GETJOB", "COUNT", 4, "FROM", "emails"):
                    first.execute_command("NACK", job[1])
            first.execute_command("ADDJOB", "reports", "monthly", 0)
            first.execute_command("PAUSE", "reports", "all", "bcast")
            loader = threading.Thread(target=traffic, args=(nodes, stop))
            loader.start()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=args.chromium,
                                                     args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(f"http://127.0.0.1:{ports[0]}/#/queues")
                time.sleep(args.seconds)
                page.screenshot(path=str(ROOT / "docs" / "dashboard-queues.png"))
                page.goto(f"http://127.0.0.1:{ports[0]}/#/")
                time.sleep(3)
                page.screenshot(path=str(ROOT / "docs" / "dashboard-cluster.png"))
                browser.close()
        finally:
            stop.set()
            if loader is not None:
                loader.join()
            for node in nodes:
                node.stop()


if __name__ == "__main__":
    main()

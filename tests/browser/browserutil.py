"""Where the browser tests find Chromium and how they start it (conftest.py's fixtures,
test_dashboard.py's skip)."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("DISQ_CHROMIUM", "/usr/bin/chromium")
# This machine's network may be closed: without the background-networking flags
# Chromium's own connections (updates, safe browsing...) are refused and it logs them.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 15_000  # what the page may take to show a change (it polls every 1.5 s)

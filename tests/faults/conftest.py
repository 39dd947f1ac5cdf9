"""tests/faults: the helpers here (jepsen, netproxy) import as top-level modules."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

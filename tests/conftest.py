"""Test-wide defaults.

Sandboxes log into the sim's own journal only unless ``PDTUI_SIM_REAL_JOURNAL=1``
asks for real journal files too (``Sandbox.create`` would otherwise turn them on
whenever systemd-journal-remote is installed). Tests that need the real journal
ask for it themselves (``real_journal=True``).
"""

import os

os.environ.setdefault("PDTUI_SIM_REAL_JOURNAL", "0")

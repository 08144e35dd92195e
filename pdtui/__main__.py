# PYTHON_ARGCOMPLETE_OK (pdtui answers a TAB itself: pdtui/commands/completion.py)
from pdtui.cli import main

raise SystemExit(main())

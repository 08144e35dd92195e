"""pdtui's faces beside the TUI: the headless line and JSON printers, status --once's table, the plan, the
phases as text, and the run history they record."""

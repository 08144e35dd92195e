"""pdtui's faces beside the TUI: the headless line and JSON printers, status --once's table, the plan, the
phases as text, the outcome's words, and the run history they record."""

"""Small helpers every layer uses: hostile text made inert, backoff, exit codes, the data folders, the
garbage collector's tuning."""

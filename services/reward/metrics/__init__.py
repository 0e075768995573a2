"""Pure scoring functions: IoU, mean relative accuracy, ROUGE, WER; and the time-limited math check."""

"""The error every adapter raises for an unreadable annotation file or record."""


class BenchmarkError(ValueError):
    """An annotation file or record the adapter cannot read; the message names the file and record."""

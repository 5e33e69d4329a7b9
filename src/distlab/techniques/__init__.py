"""Data-parallel techniques usable on their own, outside the paper packages."""

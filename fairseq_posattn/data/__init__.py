"""Data utilities: toy corpus generator and (later) structure datasets."""

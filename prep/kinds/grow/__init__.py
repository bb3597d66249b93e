"""Datasets that grow: their history (`prep log`); `--append` itself is prep.run.grow."""

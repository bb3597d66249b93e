"""Samples of any shape: prep.pack_samples and `prep samples` (pack.py), their fields."""

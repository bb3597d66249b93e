"""`prep audio`: sound files decoded once, resampled to one rate, stored int16 (or float16)."""

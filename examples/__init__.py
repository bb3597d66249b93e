"""Runnable training examples on prep-packed data (see the README, "Train with it")."""

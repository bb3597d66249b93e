"""The `prep` command line (prep.cli.main): every command and its options."""

import os

# Before numpy loads: one OpenBLAS thread. A command's parallelism is its tasks (--jobs); the
# BLAS calls in them are small (pHash's DCT), and an OpenBLAS pool of one thread a core spins
# between them: 0.13 of 2.0 CPU seconds of a 180-photo pack on 2 cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from prep.cli.main import app as app

"""The `prep` command line (prep.cli.main): every command and its options."""

from prep.cli.main import app as app

"""`python -m envharness.cli`: the `envharness` command (what `--processes` starts under torchrun)."""

import sys

from envharness.cli import main

sys.exit(main())

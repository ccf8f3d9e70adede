"""`python -m preflight` (from the folder holding the package: a ConfigMap mount, gpu_checks
of a checkout) or `python -m preflight`; under torch.distributed.run as
`-m preflight`."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())

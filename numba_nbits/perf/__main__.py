"""``python -m numba_nbits.perf``: see ``numba_nbits.perf.cli``."""
from .cli import main

raise SystemExit(main())

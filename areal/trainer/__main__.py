"""`python -m areal.trainer` = `python -m areal.trainer.main`."""

import sys

from areal.trainer.main import main

sys.exit(main())

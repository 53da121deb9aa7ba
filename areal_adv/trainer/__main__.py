"""`python -m areal_adv.trainer` = `python -m areal_adv.trainer.main`."""

import sys

from areal_adv.trainer.main import main

sys.exit(main())

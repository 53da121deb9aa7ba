"""Test-suite set-up shared by every test directory.

OpenMP threads wait passively in the test process too, as they do under
`python -m areal.trainer.main` (areal.trainer.launch_env): this file is imported
before any test module, so before torch loads.
"""

from areal.trainer.launch_env import prefer_passive_waiting

prefer_passive_waiting()

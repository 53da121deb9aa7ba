"""The trainer tests' shared helpers, importable from every test folder below this one.

The tests mirror the package (`run/`, `rollout/`, `ppo/`, `parallel/`, `lm/`), while the helpers they
share stay where they were: this folder holds the launch helpers, workers and plugin modules
(`dist_launch`, `runtime_helpers`, `plugins.*`, ...), `ppo/` the batch factories and plain-loop
references. pytest puts only a test's own folder on `sys.path`, so both go there once, here; the
plugin import paths the tests' configs name (`plugins.bad_plugins.reward_raises`) stay as they were.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

for _folder in (HERE / "ppo", HERE):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

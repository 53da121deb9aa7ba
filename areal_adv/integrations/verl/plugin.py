"""Target of the `verl.plugins` entry point: importing it registers the `areal` estimator.

`import verl` loads every `verl.plugins` entry point (policy `VERL_USE_EXTERNAL_PLUGINS`,
default `auto`) by importing it; verl logs a failing plugin only at debug level, so a
broken install shows up as "Unknown advantage estimator simply: areal". With the
policy `none`, call `areal_adv.integrations.verl.register()` yourself.
"""

from areal_adv.integrations.verl.estimator import register

register()

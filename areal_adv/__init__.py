"""areal-adv: configurable, pluggable advantage computation for PPO-family training of language models.

Importing the package installs the finder of `areal_adv.import_paths` (the
`areal.*` names and the moved module paths); an installed copy has it from
interpreter start already, through `areal_adv.pth`.
"""

from areal_adv.import_paths import install as _install_import_paths

_install_import_paths()

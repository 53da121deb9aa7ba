"""Ships `areal_adv.pth` at the top of site-packages, in the wheel and in the editable install.

The .pth file installs the import-path finder of `areal_adv.import_paths` at interpreter
start, so the seed's `areal.*` names import before anything has imported `areal_adv`.
pyproject.toml has no setting for a file outside the package, so `build_py` adds it
(setuptools ships its own `distutils-precedence.pth` the same way): into the build
folder for a wheel, and into the editable wheel's top level for `pip install -e`.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "areal_adv.pth"


class BuildPyWithPth(build_py):
    """`build_py` plus the .pth file; in editable mode it goes where the editable wheel's files go."""

    def run(self) -> None:
        super().run()
        into = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        self.copy_file(str(Path(__file__).with_name(PTH)), str(Path(into) / PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else [*outputs, str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})

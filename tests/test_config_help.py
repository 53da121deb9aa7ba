"""Every config field carries help, and docs/configuration.md's tables are the ones generated from it.

The help text is written once, on the dataclass field (`metadata={"help": ...}`);
`areal_adv.api.config_reference` walks every dataclass reachable from
`ExperimentConfig` and renders one table per section.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from areal_adv.api import config_reference as ref
from areal_adv.api.train_args import ExperimentConfig, LoraConfig, RewardFunctionConfig

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"


def test_every_config_field_has_help():
    missing = ref.fields_without_help()
    assert not missing, "config fields without a help sentence (metadata={'help': ...}):\n" + "\n".join(missing)


def test_the_walk_reaches_every_section_and_key():
    """Nested, optional and list-valued sections are all found, each at every key it sits at."""
    sections = {s.cls.__name__: s.paths for s in ref.config_sections()}
    assert sections["NormConfig"] == ("actor.reward_norm", "actor.adv_norm")
    assert sections["StageSpec"] == (
        "actor.advantage.compute",
        "actor.advantage.outcome_reward_shaping",
        "actor.advantage.estimator",
        "actor.advantage.process_adv_shaping",
    )
    assert sections["LoraConfig"] == ("model.lora",)
    assert sections["RewardFunctionConfig"] == ("reward[]",)
    assert sections["AdvantageShapingConfig"] == ("rollout.prm.advantage_shaping",)
    assert sections["DiagnosticsConfig"] == ("diagnostics",)
    n_fields = sum(len(s.fields) for s in ref.config_sections())
    assert n_fields == sum(len(dataclasses.fields(s.cls)) for s in ref.config_sections())
    assert len(sections) == 18, sorted(sections)


@dataclass
class _Inner:
    documented: int = field(default=1, metadata={"help": "A field with a help sentence."})
    bare: int = 2


@dataclass
class _Root:
    short: str = field(default="x", metadata={"help": "Too short."})
    no_period: bool = field(default=False, metadata={"help": "A help text without its final period"})
    inner: list[_Inner] = field(default_factory=list, metadata={"help": "A list of inner sections, each documented."})


def test_missing_or_unfinished_help_is_named_with_its_key():
    assert ref.fields_without_help(_Root) == [
        "short (_Root.short): help shorter than a sentence (4 words)",
        "no_period (_Root.no_period): help does not end with a period",
        "inner[].bare (_Inner.bare): no help",
    ]


def test_docs_page_is_the_generated_reference():
    page = PAGE.read_text(encoding="utf-8")
    assert page.count(ref.BEGIN) == 1 and page.count(ref.END) == 1, f"{PAGE}: expected one generated block"
    assert ref.replace_reference(page, ref.render_reference()) == page, (
        f"{PAGE} is stale: run python -m areal_adv.api.config_reference --write"
    )
    assert ref.main(["--page", str(PAGE)]) == 0


def test_every_field_and_no_other_appears_in_the_docs_tables():
    """Each section's table lists exactly its dataclass fields, with the help text verbatim."""
    page = PAGE.read_text(encoding="utf-8")
    block = page[page.index(ref.BEGIN) : page.index(ref.END)]
    for section in ref.config_sections():
        table = block.split(f"(`{section.cls.__name__}`)\n", 1)[1].split("\n### ", 1)[0]
        rows = [line for line in table.splitlines() if line.startswith("| `")]
        assert [row.split("`")[1] for row in rows] == [f.name for f in dataclasses.fields(section.cls)]
        for row, f in zip(rows, section.fields, strict=True):
            assert (f.help or "").replace("|", "\\|") in row, (section.cls.__name__, f.name)


def test_stale_page_is_reported(tmp_path, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text(f"# page\n\n{ref.BEGIN}\nold table\n{ref.END}\n", encoding="utf-8")
    assert ref.main(["--page", str(stale)]) == 1
    assert "stale" in capsys.readouterr().out
    assert ref.main(["--page", str(stale), "--write"]) == 0
    assert ref.main(["--page", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8").startswith("# page\n\n" + ref.BEGIN)


def test_defaults_render_as_yaml():
    rows = {f.name: f.default for s in ref.config_sections() for f in s.fields if s.cls is ExperimentConfig}
    assert rows["seed"] == "1" and rows["reward"] == "[]" and rows["actor"] == "(section)"
    lora = {f.name: f.default for f in next(s for s in ref.config_sections() if s.cls is LoraConfig).fields}
    assert lora == {"r": "8", "alpha": "16.0", "dropout": "0.0", "target_modules": "null"}
    reward = {f.name: f.default for f in next(s for s in ref.config_sections() if s.cls is RewardFunctionConfig).fields}
    assert reward["kwargs"] == "{}" and reward["name"] == "null" and reward["implementation"] == '""'
    advantage = next(s for s in ref.config_sections() if s.cls.__name__ == "AdvantageConfig")
    assert advantage.fields[0].default == "{implementation: default, kwargs: {}}"


def test_mean_leave1out_and_mopd_are_explained_in_the_docs():
    """Beyond its table row, `mean_leave1out` has prose with its formula; the MOPD abbreviation is spelled out."""
    prose = PAGE.read_text(encoding="utf-8").split(ref.BEGIN)[0]
    assert "`mean_leave1out: true`" in prose and "(n − 1)" in prose
    docs = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
    assert "MOPD (AReaL's multi-teacher\non-policy distillation)" in docs

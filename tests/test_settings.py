"""Settings are strict: a typo or a bad value is a one-line error naming the key, the file and the form.

Through the real CLI (`ragsync status` is the cheapest command that reads settings): exit 2, every
problem on its own line, no traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, ValidationError

from ragsync.cli import main
from ragsync.settings import NOT_SETTINGS, Settings, SettingsError, load_settings
from ragsync.settings_check import Origins, closest, nested_models, validation_problems


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAGSYNC_CONFIG", raising=False)
    return tmp_path


def run(env: dict[str, str] | None = None, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "status"], env=env or {})
    return result.exit_code, result.output


def lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line]


def test_typo_in_the_file_names_the_key_and_the_closest_setting(in_tmp: Path) -> None:
    (in_tmp / "ragsync.toml").write_text('top_kk = 3\nembed_modle_path = "/models/x"\n')

    code, output = run()

    assert code == 2
    assert lines(output) == [
        "error: ragsync.toml: unknown setting 'top_kk' (did you mean 'top_k'?)",
        "error: ragsync.toml: unknown setting 'embed_modle_path' (did you mean 'embed_model_path'?)",
    ]


def test_typo_in_an_environment_variable_is_an_error() -> None:
    code, output = run({"RAGSYNC_TOPK": "3"})

    assert code == 2
    assert lines(output) == ["error: environment variable RAGSYNC_TOPK: unknown setting (did you mean RAGSYNC_TOP_K?)"]


def test_variables_of_other_tools_are_not_settings_typos(in_tmp: Path) -> None:
    env = {name: "1" for name in NOT_SETTINGS if name != "RAGSYNC_CONFIG"}
    code, output = run({**env, "RAGSYNC_HOME": str(in_tmp / "home")})

    assert code == 0, output


def test_a_named_config_file_that_does_not_exist_is_an_error(in_tmp: Path) -> None:
    code, output = run({"RAGSYNC_CONFIG": str(in_tmp / "missing.toml")})

    assert code == 2
    assert lines(output) == [f"error: RAGSYNC_CONFIG={in_tmp / 'missing.toml'}: the settings file does not exist"]


def test_the_default_file_is_optional(in_tmp: Path) -> None:
    code, output = run({"RAGSYNC_HOME": str(in_tmp / "home")})

    assert code == 0, output


def test_broken_toml_is_one_line_naming_the_file(in_tmp: Path) -> None:
    (in_tmp / "conf.toml").write_text("top_k = 3\ntop_k = \n")

    code, output = run({"RAGSYNC_CONFIG": "conf.toml"})

    assert code == 2
    assert lines(output) == ["error: conf.toml: not valid TOML: Invalid value (at line 2, column 9)"]


def test_each_bad_value_is_one_line_with_the_setting_the_source_and_the_form(in_tmp: Path) -> None:
    (in_tmp / "ragsync.toml").write_text('top_k = "eight"\nprofile = "clustr"\nsession_secret = 42\n')

    code, output = run({"RAGSYNC_DENSE_FLOOR": "high", "RAGSYNC_ABSTAIN_WHEN_FIRST_SEARCH_EMPTY": "maybe"})

    assert code == 2
    assert "Traceback" not in output and "pydantic" not in output
    assert sorted(lines(output)) == sorted(
        [
            "error: ragsync.toml: top_k = 'eight' is invalid: expected an integer",
            "error: ragsync.toml: profile = 'clustr' is invalid: expected 'embedded' or 'cluster'",
            # a secret's value is never repeated back
            "error: ragsync.toml: session_secret is invalid: expected a string",
            "error: environment variable RAGSYNC_DENSE_FLOOR: dense_floor = 'high' is invalid: expected a number",
            "error: environment variable RAGSYNC_ABSTAIN_WHEN_FIRST_SEARCH_EMPTY: "
            "abstain_when_first_search_empty = 'maybe' is invalid: expected true or false",
        ]
    )


def test_two_sources_with_one_name_are_refused_by_every_command(in_tmp: Path) -> None:
    (in_tmp / "a").mkdir()
    (in_tmp / "b").mkdir()
    (in_tmp / "ragsync.toml").write_text(
        '[[sources]]\nname = "docs"\npath = "a"\ntenants = ["acme"]\n\n'
        '[[sources]]\nname = "wiki"\npath = "b"\ntenants = ["acme"]\n\n'
        '[[sources]]\nname = "docs"\npath = "b"\ntenants = ["acme"]\n'
    )

    code, output = run({"RAGSYNC_HOME": str(in_tmp / "home")})

    assert code == 2
    assert lines(output) == [
        "error: ragsync.toml: sources is invalid: sources[0] and sources[2] are both named 'docs':"
        " every source needs a name of its own (the namespace of its doc IDs)"
    ]


def test_a_bad_cli_option_value_is_named_as_such(in_tmp: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(top_k="x")

    assert caught.value.problems == ["a command-line option: top_k = 'x' is invalid: expected an integer"]


def test_environment_wins_over_the_file(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (in_tmp / "ragsync.toml").write_text("top_k = 3\nrrf_k = 10\n")
    monkeypatch.setenv("RAGSYNC_TOP_K", "5")

    settings = load_settings()

    assert (settings.top_k, settings.rrf_k) == (5, 10)


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: Path
    interval_s: float = 60.0


class _WithTables(BaseModel):
    model_config = ConfigDict(extra="forbid")
    top_k: int = 8
    sources: list[_Source] = []


def test_nested_tables_are_checked_the_same_way(tmp_path: Path) -> None:
    data: dict[str, Any] = {"sources": [{"path": "/a"}, {"path": "/b", "intervl_s": 5, "interval_s": "often"}]}
    origins = Origins(tmp_path / "ragsync.toml", frozenset(data), {}, frozenset())
    with pytest.raises(ValidationError) as caught:
        _WithTables.model_validate(data)

    problems = validation_problems(caught.value, _WithTables, origins)

    where = tmp_path / "ragsync.toml"
    assert sorted(problems) == sorted(
        [
            f"{where}: unknown setting 'intervl_s' in [sources] (did you mean 'interval_s'?)",
            f"{where}: sources[1].interval_s = 'often' is invalid: expected a number",
        ]
    )


def test_every_table_reachable_from_settings_forbids_unknown_keys() -> None:
    """Strictness is generic only if each nested model refuses extras: guard the settings others add."""
    pending: list[type[BaseModel]] = [Settings]
    seen: set[type[BaseModel]] = set()
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        assert model.model_config.get("extra") == "forbid", f"{model.__name__} must set extra='forbid'"
        for field in model.model_fields.values():
            pending.extend(nested_models(field.annotation))


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("topk", "top_k"), ("TOP-K", "top_k"), ("embed_modle_path", "embed_model_path"), ("zzz", None)],
)
def test_closest(typo: str, meant: str | None) -> None:
    assert closest(typo, Settings.model_fields) == meant


def test_dev_null_means_no_settings_file(in_tmp: Path) -> None:
    (in_tmp / "ragsync.toml").write_text("top_kk = 3\n")  # would be refused if it were read

    code, output = run({"RAGSYNC_CONFIG": os.devnull, "RAGSYNC_HOME": str(in_tmp / "home")})

    assert code == 0, output


def test_a_declared_source_must_name_its_tenants(in_tmp: Path) -> None:
    (in_tmp / "ragsync.toml").write_text('[[sources]]\nname = "docs"\npath = "/srv/docs"\n')
    with pytest.raises(SettingsError) as caught:
        load_settings()
    [problem] = caught.value.problems
    assert "sources[0].tenants" in problem, problem

    (in_tmp / "ragsync.toml").write_text('[[sources]]\nname = "docs"\npath = "/srv/docs"\ntenants = ["acme", "a b"]\n')
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "sources[0].tenants[1]" in caught.value.problems[0]

    (in_tmp / "ragsync.toml").write_text('[[sources]]\nname = "docs"\npath = "/srv/docs"\ntenants = ["acme"]\n')
    assert load_settings().sources[0].tenants == ("acme",)

"""A user's own configs beside the packaged ones: found through hydra.searchpath (absolute or
relative to the working directory), never silently shadowed by a packaged file of the same name;
and relative paths in configs found from the working directory first, then the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.compose import check_group_choices, compose
from selector.errors import UserError
from selector.paths import PACKAGE_DIR, find_path


def _folder(root: Path) -> Path:
    (root / "my_conf" / "policy").mkdir(parents=True)
    (root / "my_conf" / "policy" / "lenient.yaml").write_text("rule: point\nfloors: {sentiment: 0.25}\n")
    return root / "my_conf"


def test_a_users_folder_is_found_by_absolute_and_relative_searchpath(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    conf = _folder(tmp_path)
    assert compose([f"hydra.searchpath=[file://{conf}]", "policy=lenient"]).policy.floors == {"sentiment": 0.25}
    monkeypatch.chdir(tmp_path)
    check_group_choices(["hydra.searchpath=[file://my_conf]", "policy=lenient"])
    assert compose(["hydra.searchpath=[file://my_conf]", "policy=lenient"]).policy.floors == {"sentiment": 0.25}


def test_a_users_file_named_like_a_packaged_one_is_refused(tmp_path: Path) -> None:
    conf = _folder(tmp_path)
    (conf / "policy" / "default.yaml").write_text("floors: {sentiment: 0.1}\n")
    with pytest.raises(UserError) as err:
        check_group_choices([f"hydra.searchpath=[file://{conf}]", "policy=default"])
    assert str(err.value).startswith(f"{conf / 'policy' / 'default.yaml'}: a packaged config has the same name")
    check_group_choices([f"hydra.searchpath=[file://{conf}]", "policy=lenient"])  # another choice is fine


def test_relative_paths_mean_the_working_directory_first_then_the_package(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    assert find_path("conf/arch/qwen2.5-7b.json") == PACKAGE_DIR / "conf" / "arch" / "qwen2.5-7b.json"
    (tmp_path / "conf" / "arch").mkdir(parents=True)
    (tmp_path / "conf" / "arch" / "qwen2.5-7b.json").write_text("{}")
    assert find_path("conf/arch/qwen2.5-7b.json") == Path("conf/arch/qwen2.5-7b.json")  # the user's own wins
    assert find_path("no/such/thing") == Path("no/such/thing")  # reported under the name the user wrote


def test_a_bad_value_in_a_users_folder_names_that_file_and_line(tmp_path: Path) -> None:
    """The schema's checks (ranges, unknown keys) and the policy's name the file the value is in,
    whether packaged or the user's, and the command line when it came from there."""
    from selector.compose import compose_raw, origin_of
    from selector.errors import ConfigError
    from selector.sweep.preflight import job_config_and_notices

    conf = _folder(tmp_path)
    (conf / "engine").mkdir()
    (conf / "engine" / "wide.yaml").write_text("kind: hf\n# one batch at a time is the minimum\nbatch_size: 0\n")
    (conf / "policy" / "impossible.yaml").write_text("rule: point\nfloors:\n  sentiment: 1.5\n")
    search = f"hydra.searchpath=[file://{conf}]"
    with pytest.raises(ConfigError) as err:
        compose([search, "engine=wide"])
    assert (err.value.where, err.value.field) == (f"{conf / 'engine' / 'wide.yaml'}:3", "engine.batch_size")
    with pytest.raises(ConfigError) as err:
        compose([search, "engine=wide", "engine.batch_size=-1"])
    assert (err.value.where, err.value.field) == ("command line", "engine.batch_size")
    overrides = [search, "policy=impossible"]
    job, choices = compose_raw(overrides)
    with pytest.raises(ConfigError) as err:
        job_config_and_notices(job, origin_of(overrides, choices))
    assert (err.value.where, err.value.field) == (f"{conf / 'policy' / 'impossible.yaml'}:3", "policy.floors.sentiment")

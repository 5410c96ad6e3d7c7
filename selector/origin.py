"""Where a config value came from, so that every error about one names the same thing: the command
line, or the file and line it was read from, whether that file is packaged (selector/conf/) or in a
user's own config folder (hydra.searchpath).

One `Origin` describes one composed config: the file Hydra chose for each group, the keys the
command line set, and the user's folders. Values that do not come through Hydra (an eval set's
files and its policy.yaml) are named by their own readers, with the same file:line form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from selector.errors import ConfigError
from selector.paths import CONF_DIR
from selector.yaml_lines import yaml_line

COMMAND_LINE = "command line"


@dataclass(frozen=True)
class Origin:
    choices: Mapping[str, str] = field(default_factory=dict)  # config group -> the file Hydra chose (its stem)
    given: frozenset[str] = frozenset()  # dotted keys the command line set
    dirs: tuple[Path, ...] = ()  # the user's config folders, searched after the packaged conf/ as Hydra does

    def from_command_line(self, key: str) -> bool:
        """The key, or a mapping above it (`policy.floors={a: 0.5}`), was set on the command line.
        A group choice (`policy=strict`) picks a file: the values are that file's."""
        return key in self.given or any(key.startswith(g + ".") for g in self.given if "." in g)

    def find(self, group: str, name: str) -> Path | None:
        """conf/<group>/<name>.yaml in the packaged configs or a user's folder, the first that exists."""
        return next((p for d in (CONF_DIR, *self.dirs) if (p := Path(d) / group / f"{name}.yaml").is_file()), None)

    def where(self, key: str, stem: str | None = None) -> str:
        """'command line', or '<file>:<line>' of the file the key's group was read from. stem: that
        file's name when no group choice is known (a precision's own name)."""
        if self.from_command_line(key):
            return COMMAND_LINE
        group, _, rest = key.partition(".")
        name = self.choices.get(group) or stem
        path = self.find(group, name) if name and rest else None
        if path is not None:
            return file_line(path, rest.split("."))
        top = CONF_DIR / "config.yaml"
        if yaml_line(top, key.split(".")):
            return file_line(top, key.split("."))
        return f"{group} config '{name}'" if name else shown(top)

    def error(self, key: str, problem: str, stem: str | None = None) -> ConfigError:
        return ConfigError(self.where(key, stem), field=key, problem=problem)


def file_line(path: Path, keys: list[str]) -> str:
    """'<file>:<line>' of a (nested) key (or of the deepest part of it the file has), or the file
    alone when none of it is there."""
    line = yaml_line(path, keys)
    return f"{shown(path)}:{line}" if line else shown(path)


def shown(path: Path) -> str:
    """A file as a person finds it: relative to the working directory when it is under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)

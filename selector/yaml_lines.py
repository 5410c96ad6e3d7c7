"""Where a key sits in a YAML file, so an error can name the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import yaml


def yaml_line(path: Path, keys: list[str]) -> int | None:
    """1-based line of a (nested) key in a YAML file, or None."""
    try:
        node = yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        for k, v in node.value:
            if getattr(k, "value", None) == key:
                line, node = k.start_mark.line + 1, v
                break
        else:
            break
    return line

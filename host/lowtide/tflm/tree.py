"""Where TFLite Micro's C++ sources come from: a tree exported by TFLM's own `create_tflm_tree.py`, pinned.

TFLM's sources are in no package registry, so the firmware's `tflm` runtimes build against a tree that the
`LOWTIDE_TFLM_DIR` setting names: a folder holding the reference tree and the CMSIS-NN tree, either unpacked
(`tflm-ref/`, `tflm-cmsis-nn/`) or as the archives `scripts/make-tflm-tree.sh` writes (`tflm-ref-<commit>.tar.gz`,
`tflm-cmsis-nn-<commit>.tar.gz`). Archives are unpacked once into the checkout's `.pio/tflm/src/`.

A tree is identified by its content, not by its name: lowtide's 32-bit arena figures and the firmware's kernels were
checked against one TFLM commit, so a tree whose files differ from that commit's export is refused.
"""

from __future__ import annotations

import enum
import fcntl
import hashlib
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from lowtide.errors import LowtideError

PROJECT_DIR = Path(__file__).resolve().parents[3]
TFLM_COMMIT = "90b983c2b3f1480642e040bbd2ddb37b998f3424"
TREE_SETTING = "LOWTIDE_TFLM_DIR"
# What tests and CI use when the setting is absent: the archives kept beside the checkout.
DEFAULT_TFLM_DIR = PROJECT_DIR.parent / "shared" / "tflm"
UNPACK_DIR = PROJECT_DIR / ".pio" / "tflm" / "src"


class KernelSet(str, enum.Enum):
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


def _configured_dir() -> Path:
    configured = os.environ.get(TREE_SETTING)
    directory = Path(configured).expanduser() if configured else DEFAULT_TFLM_DIR
    if not directory.is_dir():
        how = (f"{TREE_SETTING}={configured} is not a folder" if configured
               else f"no TFLM sources: set {TREE_SETTING} to the folder scripts/make-tflm-tree.sh writes")
        raise LowtideError(how)
    return directory


def _unpack(archive: Path, kernels: KernelSet) -> Path:
    """Unpacks `archive` once (under a lock: parallel builds share it) and returns the tree inside it."""
    target = UNPACK_DIR / archive.name.removesuffix(".tar.gz")
    tree = target / kernels.tree_name
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = target / ".unpacked"
        if not done.is_file():
            try:
                with tarfile.open(archive) as tar:
                    tar.extractall(target, filter="data")
            except (OSError, tarfile.TarError) as exc:
                raise LowtideError(f"cannot unpack the TFLM archive: {exc}", archive) from None
            done.write_text(TFLM_COMMIT + "\n")
    if not (tree / "tensorflow").is_dir():
        raise LowtideError(f"the archive holds no {kernels.tree_name}/ tree", archive)
    return tree


def locate_tree(kernels: KernelSet) -> TflmTree:
    """The pinned tree for `kernels`, unpacked if it is an archive; refused if missing or at another commit."""
    directory = _configured_dir()
    unpacked = directory / kernels.tree_name
    archives = sorted(directory.glob(f"{kernels.tree_name}-*.tar.gz"))
    if (unpacked / "tensorflow").is_dir():
        root = unpacked
    elif archives:
        root = _unpack(archives[-1], kernels)
    else:
        raise LowtideError(f"no {kernels.tree_name}/ tree or {kernels.tree_name}-*.tar.gz archive in {directory} "
                           f"(scripts/make-tflm-tree.sh makes both)")
    stamp = root / ".lowtide-fingerprint"
    fingerprint = stamp.read_text().strip() if stamp.is_file() and root.is_relative_to(UNPACK_DIR) else None
    if fingerprint is None:
        fingerprint = tree_fingerprint(root)
        if root.is_relative_to(UNPACK_DIR):  # our own unpacked copy: nobody edits it, so check it once
            stamp.write_text(fingerprint + "\n")
    if fingerprint != TREE_FINGERPRINTS[kernels]:
        raise LowtideError(f"the TFLM tree is not the export of commit {TFLM_COMMIT[:7]} that lowtide is pinned to "
                           f"(content differs); make it with scripts/make-tflm-tree.sh", root)
    return TflmTree(kernels, root)

"""Seeded mutations of a partition store, and the fuzz loop over them (used by test_fuzz.py).

Two families: *corruptions* (bit flips in data and headers, truncations, appended bytes, swapped
or deleted files, hand edits of the manifest) that leave the manifest's checksums stale, and
*foreign writes* that rewrite a file or the manifest **and** update every checksum, as another
tool writing a wrong store would; only the semantic checks can catch those.

Run the 500-mutation count by hand::

    PYTHONPATH=. python tests/store/store_mutations.py 500
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gnnsys.errors import PartitionStoreError
from gnnsys.store import load_book, load_partition, load_shard, read_manifest, verify
from gnnsys.store.integrity import file_digests
from gnnsys.store.layout import manifest_checksum, shard_file

Mutation = Callable[[Path, np.random.Generator], str]


# ---- helpers that write like another tool: consistent checksums, wrong content -------------
def edit_manifest(root: Path, edit: Callable[[dict], None], *, resign: bool) -> None:
    path = root / "manifest.json"
    obj = json.loads(path.read_text())
    edit(obj)
    if resign:
        obj["checksum"] = manifest_checksum(obj)
    path.write_text(json.dumps(obj, indent=1))


def rewrite_array(root: Path, rel: str, arr: np.ndarray) -> None:
    """Save ``arr`` as ``root/rel`` and update its manifest entry and the manifest checksum."""
    np.save(root / rel, arr, allow_pickle=False)
    sha, fast = file_digests(root / rel)

    def edit(obj: dict) -> None:
        obj["files"][rel] = {
            "shape": list(arr.shape),
            "dtype": arr.dtype.str,
            "sha256": sha,
            "xxh3": fast,
        }

    edit_manifest(root, edit, resign=True)


# ---- corruptions ---------------------------------------------------------------------------
def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _pick(root: Path, rng: np.random.Generator, suffix: str = "") -> Path:
    files = [p for p in _files(root) if p.name.endswith(suffix)]
    return files[int(rng.integers(len(files)))]


def _flip(path: Path, rng: np.random.Generator, limit: int | None = None) -> str:
    data = bytearray(path.read_bytes())
    pos = int(rng.integers(min(len(data), limit or len(data))))
    data[pos] ^= 1 << int(rng.integers(8))
    path.write_bytes(bytes(data))
    return f"flip byte {pos}"


def flip_data(root: Path, rng: np.random.Generator) -> str:
    path = _pick(root, rng)
    return f"{path.relative_to(root)}: {_flip(path, rng)}"


def flip_header(root: Path, rng: np.random.Generator) -> str:
    path = _pick(root, rng, ".npy")
    return f"{path.relative_to(root)} header: {_flip(path, rng, limit=128)}"


def truncate(root: Path, rng: np.random.Generator) -> str:
    path = _pick(root, rng)
    data = path.read_bytes()
    keep = int(rng.integers(len(data)))
    path.write_bytes(data[:keep])
    return f"{path.relative_to(root)}: truncate to {keep} of {len(data)} bytes"


def append(root: Path, rng: np.random.Generator) -> str:
    path = _pick(root, rng)
    with open(path, "ab") as f:
        f.write(rng.bytes(int(rng.integers(1, 64))))
    return f"{path.relative_to(root)}: append bytes"


def swap_files(root: Path, rng: np.random.Generator) -> str:
    files = _files(root)
    while True:
        i, j = rng.choice(len(files), size=2, replace=False)
        a, b = files[int(i)], files[int(j)]
        if a.read_bytes() != b.read_bytes():
            break
    tmp = a.with_suffix(".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    return f"swap {a.relative_to(root)} <-> {b.relative_to(root)}"


def swap_parts(root: Path, rng: np.random.Generator) -> str:
    names = sorted(str(p.relative_to(root / "part-0")) for p in (root / "part-0").rglob("*.npy"))
    name = names[int(rng.integers(len(names)))]
    a, b = root / "part-0" / name, root / "part-1" / name
    tmp = a.with_suffix(".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    return f"swap part-0/{name} <-> part-1/{name}"


def delete(root: Path, rng: np.random.Generator) -> str:
    path = _pick(root, rng)
    path.unlink()
    return f"delete {path.relative_to(root)}"


def _leaves(obj: object, prefix: tuple = ()) -> list[tuple]:
    if isinstance(obj, dict):
        return [leaf for k, v in obj.items() for leaf in _leaves(v, (*prefix, k))]
    if isinstance(obj, list) and obj:
        return [leaf for i, v in enumerate(obj) for leaf in _leaves(v, (*prefix, i))]
    return [prefix]


def _changed(value: object, rng: np.random.Generator) -> object:
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int):
        return value + int(rng.choice([-1, 1, 7, -(2**40)]))
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value[:-1] + ("x" if not value.endswith("x") else "y") if value else "x"
    return [value, 0]


def _set_leaf(obj: dict, leaf: tuple, value: object) -> None:
    target = obj
    for key in leaf[:-1]:
        target = target[key]
    if leaf:
        target[leaf[-1]] = value


def edit_manifest_value(root: Path, rng: np.random.Generator) -> str:
    obj = json.loads((root / "manifest.json").read_text())
    leaves = [leaf for leaf in _leaves(obj) if leaf]
    leaf = leaves[int(rng.integers(len(leaves)))]
    target: object = obj
    for key in leaf:
        target = target[key]  # type: ignore[index]
    new = _changed(target, rng)
    edit_manifest(root, lambda o: _set_leaf(o, leaf, new), resign=False)
    return f"manifest: {'/'.join(map(str, leaf))} = {new!r}"


def edit_manifest_keys(root: Path, rng: np.random.Generator) -> str:
    obj = json.loads((root / "manifest.json").read_text())
    key = sorted(obj)[int(rng.integers(len(obj)))]
    if rng.random() < 0.5:
        resign = key != "checksum" and bool(rng.random() < 0.5)  # re-signing re-adds it
        edit_manifest(root, lambda o: o.pop(key), resign=resign)
        return f"manifest: drop {key}"
    edit_manifest(root, lambda o: o.update(extra=1), resign=bool(rng.random() < 0.5))
    return "manifest: add key extra"


# ---- foreign writes: checksums updated, content wrong --------------------------------------
def _load(root: Path, rel: str) -> np.ndarray:
    return np.load(root / rel, allow_pickle=False)


def _bad_array(root: Path, part: int, rng: np.random.Generator) -> tuple[str, np.ndarray]:
    m = read_manifest(root)

    def p(name: str) -> str:
        return shard_file(part, name)

    owned, halo = _load(root, p("owned_gid")), _load(root, p("halo_gid"))
    lid = _load(root, p("indices_local"))
    kind = int(rng.integers(12))
    pos = lambda a: int(rng.integers(max(len(a), 1)))  # noqa: E731
    if kind == 0:  # local index past the end
        lid[pos(lid)] = len(owned) + len(halo) + int(rng.integers(1, 5))
        return p("indices_local"), lid
    if kind == 1:  # local index naming another node (in range)
        i = pos(lid)
        lid[i] = (lid[i] + 1) % (len(owned) + len(halo))
        return p("indices_local"), lid
    if kind == 2:
        mask = _load(root, p("train_mask"))
        mask.view(np.uint8)[pos(mask)] = 2
        return p("train_mask"), mask
    if kind == 3:
        y = _load(root, p("y"))
        y[pos(y)] = (m.num_classes or 1) + int(rng.integers(3))
        return p("y"), y
    if kind == 4:
        x = _load(root, p("x"))
        x[pos(x), 0] = np.nan if rng.random() < 0.5 else np.inf
        return p("x"), x
    if kind == 5:
        return p("owned_gid"), owned[::-1].copy()
    if kind == 6:
        hp = _load(root, p("halo_part"))
        hp[pos(hp)] = part
        return p("halo_part"), hp
    if kind == 7:
        e_id = _load(root, p("e_id"))
        if rng.random() < 0.5:  # out of range
            e_id[pos(e_id)] = m.num_edges + int(rng.integers(1, 9))
        else:  # in range, but another shard's (or a duplicate) edge id
            i = pos(e_id)
            e_id[i] = (e_id[i] + int(rng.integers(1, m.num_edges))) % m.num_edges
        return p("e_id"), e_id
    if kind == 8:
        indptr = _load(root, p("indptr"))
        indptr[1 + pos(indptr[1:-1])] = indptr[-1] + 1
        return p("indptr"), indptr
    if kind == 9:
        return p("train_mask"), _load(root, p("train_mask")).astype(np.int8)
    if kind == 10:
        return p("y"), _load(root, p("y")).astype(np.int32)
    gid = _load(root, p("indices_gid"))
    gid[pos(gid)] = m.num_nodes + int(rng.integers(1, 9))
    return p("indices_gid"), gid


def foreign_array(root: Path, rng: np.random.Generator) -> str:
    rel, arr = _bad_array(root, int(rng.integers(2)), rng)
    rewrite_array(root, rel, arr)
    return f"foreign write of {rel}"


def _n(obj: dict) -> int:
    """The one node type's count in a homogeneous manifest."""
    return int(obj["node_types"][0]["num_nodes"])


def _bump(counts: dict, by: int) -> None:
    """Add ``by`` to the one entry of a per-type count."""
    (key,) = counts
    counts[key] += by


def foreign_manifest(root: Path, rng: np.random.Generator) -> str:
    edits: list[tuple[str, Callable[[dict], None]]] = [
        ("num_nodes + 1", lambda o: o["node_types"][0].update(num_nodes=_n(o) + 1)),
        (
            "num_edges - 1",
            lambda o: o["relations"][0].update(num_edges=o["relations"][0]["num_edges"] - 1),
        ),
        ("num_parts 3", lambda o: o.update(num_parts=3)),
        ("num_classes 1", lambda o: o.update(num_classes=1)),
        ("parts[0].num_owned + 1", lambda o: _bump(o["parts"][0]["num_owned"], 1)),
        ("parts[1].num_halo - 1", lambda o: _bump(o["parts"][1]["num_halo"], -1)),
        ("num_nodes '12'", lambda o: o["node_types"][0].update(num_nodes=str(_n(o)))),
        ("parts swapped", lambda o: o.update(parts=o["parts"][::-1])),
    ]
    what, edit = edits[int(rng.integers(len(edits)))]
    edit_manifest(root, edit, resign=True)
    return f"foreign manifest: {what}"


MUTATIONS: dict[str, Mutation] = {
    "flip_data": flip_data,
    "flip_header": flip_header,
    "truncate": truncate,
    "append": append,
    "swap_files": swap_files,
    "swap_parts": swap_parts,
    "delete": delete,
    "edit_manifest_value": edit_manifest_value,
    "edit_manifest_keys": edit_manifest_keys,
    "foreign_array": foreign_array,
    "foreign_manifest": foreign_manifest,
}


# ---- the fuzz loop ---------------------------------------------------------------------------
def load_like_train(root: Path) -> None:
    """What ``gnnsys train --store`` (its pre-flight) and its workers read before training."""
    manifest = read_manifest(root)
    load_book(root)
    for part in range(manifest.num_parts):
        load_shard(root, part)  # a worker
    load_partition(root)  # the driver


@dataclass
class FuzzCounts:
    detected: int = 0
    accepted: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    """Detected, but the message does not name a file of the store and the fix."""


def classify(root: Path, what: str, counts: FuzzCounts) -> None:
    for check in (load_like_train, verify):
        try:
            check(root)
        except PartitionStoreError as err:
            msg = str(err)
            if str(root) not in msg or "gnnsys partition" not in msg or len(msg) > 600:
                counts.unreadable.append(f"{what}: {msg}")
        except Exception as err:  # noqa: BLE001 -- counting, not handling
            counts.other.append(f"{what}: {type(err).__name__}: {err}")
            return
        else:
            counts.accepted.append(f"{what} ({check.__name__})")
            return
    counts.detected += 1


def run_fuzz(store: Path, work: Path, num: int, seed: int) -> FuzzCounts:
    """Apply ``num`` seeded mutations, each to a fresh copy of ``store``, and classify them."""
    rng = np.random.default_rng(seed)
    names = sorted(MUTATIONS)
    counts = FuzzCounts()
    for i in range(num):
        root = work / f"m{i}"
        shutil.copytree(store, root)
        name = names[int(rng.integers(len(names)))]
        what = f"#{i} {name}: {MUTATIONS[name](root, rng)}"
        classify(root, what, counts)
        shutil.rmtree(root)
    return counts


def small_store(root: Path) -> Path:
    """A 2-part store of a 300-node seeded SBM with features, labels and masks."""
    from gnnsys.datasets import load
    from gnnsys.partitioners import partition
    from gnnsys.store import write_partitions

    graph = load("synthetic:sbm", num_nodes=300, num_features=8, seed=0)
    write_partitions(graph, partition(graph, "metis", 2, seed=0), root, num_hops=2)
    return root


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    with tempfile.TemporaryDirectory() as tmp:
        base = small_store(Path(tmp) / "store")
        result = run_fuzz(base, Path(tmp), n, seed=int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(
        f"{n} mutations: detected {result.detected}, accepted {len(result.accepted)}, "
        f"other exceptions {len(result.other)}, unreadable messages {len(result.unreadable)}"
    )
    for line in result.accepted + result.other + result.unreadable:
        print("  ", line)

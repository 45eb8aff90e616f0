"""Design rules of STYLE.md, checked by parsing the source: layering, size budget, public API."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

import gnnsys

PKG = Path(gnnsys.__file__).parent
BASE = {"types", "errors", "prefetch"}  # prefetch: stage-neutral threads (Prefetcher)
STAGES = ["datasets", "partitioners", "store", "sampler", "cache", "loader"]
ALLOWED: dict[str, set[str]] = {
    "types": {"errors"}, "errors": set(), "prefetch": set(), "kernels": set(BASE),
}  # fmt: skip
for i, stage in enumerate(STAGES):
    ALLOWED[stage] = BASE | set(STAGES[:i])
ALLOWED["cache"] |= {"kernels"}
ALLOWED["loader"] |= {"kernels"}
ALLOWED["models"] = BASE | {"kernels"}
RAY_IMPORTERS = {"train", "out_of_core"}  # the units that run distributed work (actors, Ray Data)
TRITON_IMPORTERS = {"kernels"}


def modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def top_unit(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0].removesuffix(".py")


def _import_names(nodes: Iterable[ast.AST]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def imported(path: Path) -> set[str]:
    return _import_names(ast.walk(ast.parse(path.read_text())))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_import_layering(path: Path) -> None:
    unit = top_unit(path)
    for name in imported(path):
        root = name.split(".")[0]
        if root == "ray":
            assert unit in RAY_IMPORTERS, f"{path} imports ray; only {sorted(RAY_IMPORTERS)} may"
        if root == "triton":
            assert unit in TRITON_IMPORTERS, f"{path} imports triton; only gnnsys/kernels/ may"
        if root != "gnnsys" or unit not in ALLOWED:
            continue
        parts = name.split(".")
        if len(parts) == 1:
            continue
        target = parts[1]
        assert target == unit or target in ALLOWED[unit], (
            f"{path.relative_to(PKG)} imports gnnsys.{target}; stage {unit!r} may import only "
            f"{sorted(ALLOWED[unit])}"
        )


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_size_budget(path: Path) -> None:
    text = path.read_text()
    assert text.count("\n") <= 600, f"{path} has {text.count(chr(10))} lines; the limit is 600"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            limit = 40 if node.name == "__init__" else 80
            assert length <= limit, f"{path}:{node.lineno} {node.name} has {length} lines > {limit}"


def test_public_api_snapshot() -> None:
    assert sorted(gnnsys.__all__) == sorted(
        [
            "Assignment",
            "Block",
            "GnnsysError",
            "Graph",
            "PartitionBook",
            "PartitionShard",
            "PartitionStoreError",
            "SampledSubgraph",
            "WorkerFailedError",
            "__version__",
            "load_dataset",
        ]
    )


def test_import_has_no_side_effects() -> None:
    import subprocess
    import sys

    code = (
        "import os, sys; before = dict(os.environ); import gnnsys; "
        "assert dict(os.environ) == before, 'env changed'; "
        "assert 'ray' not in sys.modules, 'ray imported'; "
        "assert 'triton' not in sys.modules, 'triton imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- runtime, config and commands ------------------------------------------------------------
TRAIN_ROOMS: dict[str, set[str]] = {
    # room -> rooms of gnnsys.train it may import (every room may import the stages)
    "remote": {"remote", "threads"},
    "layer0": {"layer0", "remote"},
    "metrics": set(),
    "eval": {"device", "eval", "metrics", "remote"},  # exact evaluation, layer by layer
    "device": set(),  # the step's device: what the stages of every runtime room use
    "pipeline": {"device"},
    "threads": set(),
    "schedule": set(),
    "node_types": set(),
    "embedding": {"remote"},
    "inputs": {"layer0", "remote"},
    "trainer": {"device", "embedding", "inputs", "pipeline", "remote", "schedule"},
    "link": {
        "device",
        "eval",
        "link",
        "metrics",
        "pipeline",
        "schedule",
        "trainer",
    },  # fmt: skip
    "models": set(),
    "topology": set(),
    "worker": {
        "device",
        "eval",
        "layer0",
        "link",
        "node_types",
        "pipeline",
        "remote",
        "schedule",
        "threads",
        "trainer",
    },
    "rank": {
        "device",
        "embedding",
        "eval",
        "inputs",
        "layer0",
        "link",
        "metrics",
        "node_types",
        "pipeline",
        "remote",
        "threads",
        "trainer",
        "worker",
    },
    "control": {
        "control",
        "device",
        "embedding",
        "eval",
        "layer0",
        "link",
        "metrics",
        "models",
        "node_types",
        "pipeline",
        "rank",
        "remote",
        "schedule",
        "topology",
        "trainer",
        "worker",
    },
}
TOP_LEVEL = {"config", "presets", "cli", "commands", "__main__"}


def _room(path: Path) -> str | None:
    rel = path.relative_to(PKG).parts
    if rel[0] != "train" or len(rel) < 2 or rel[1] == "__init__.py":
        return None
    return rel[1].removesuffix(".py")


def runtime_imports(path: Path) -> set[str]:
    """Module-level imports that run at import time (``if TYPE_CHECKING:`` blocks excluded)."""
    body = ast.parse(path.read_text()).body
    return _import_names(
        node
        for node in body
        if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
    )


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_runtime_rooms(path: Path) -> None:
    room = _room(path)
    for name in imported(path):
        parts = name.split(".")
        if parts[0] != "gnnsys" or len(parts) < 2:
            continue
        if top_unit(path) not in TOP_LEVEL:
            assert parts[1] not in TOP_LEVEL or name in _type_only(path), (
                f"{path.relative_to(PKG)} imports {name}; only the CLI layer may, "
                "stages and the runtime get their own Config records"
            )
        if room is not None and parts[1] == "train" and len(parts) > 2:
            assert parts[2] in TRAIN_ROOMS[room] or name in _type_only(path), (
                f"{path.relative_to(PKG)} ({room}) imports {name}; room {room!r} may import "
                f"only {sorted(TRAIN_ROOMS[room])}"
            )


def _type_only(path: Path) -> set[str]:
    return imported(path) - runtime_imports(path)


def test_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for path in modules():
        rel = path.relative_to(PKG.parent).with_suffix("")
        mod = ".".join(rel.parts).removesuffix(".__init__")
        graph[mod] = {n for n in runtime_imports(path) if n.startswith("gnnsys")}
    state: dict[str, int] = {}

    def visit(mod: str, trail: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if dep not in graph:
                continue
            assert state.get(dep) != 1, f"import cycle: {' -> '.join([*trail, mod, dep])}"
            if dep not in state:
                visit(dep, [*trail, mod])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [])


def test_train_tests_mirror_the_train_rooms() -> None:
    """``tests/train/`` has a folder per package room of ``gnnsys/train`` and no other folder.

    Module rooms (``trainer.py``, ``pipeline.py``, ...) keep their ``test_<room>.py`` (or
    ``test_<room>_<topic>.py``) files at ``tests/train/``; a package room's tests live in
    ``tests/train/<room>/``.
    """
    tests = Path(__file__).parent / "train"
    package_rooms = {p.name for p in (PKG / "train").iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == package_rooms, (
        f"tests/train folders {sorted(folders)} != gnnsys/train package rooms "
        f"{sorted(package_rooms)}; put a room's tests in tests/train/<room>/"
    )
    module_rooms = {p.stem for p in (PKG / "train").glob("*.py") if p.stem != "__init__"}
    for path in tests.glob("test_*.py"):
        name = path.stem.removeprefix("test_")  # test_<room>.py or test_<room>_<topic>.py
        assert any(name == r or name.startswith(f"{r}_") for r in module_rooms), (
            f"{path.name} names no module room of gnnsys/train; move it to its room's folder"
        )


# ---- branches on the graph's kind ----------------------------------------------------------------
KIND_BRANCHES: dict[str, tuple[int, str]] = {
    # module -> (most branches on the graph's kind, why the kind is a real parameter there)
    # -- user objects and files: their kind is read where they come in
    "datasets/__init__.py": (3, "the dataset's kind is read from its files"),
    "datasets/ogb.py": (1, "OGB's two folder layouts"),
    "store/reader.py": (1, "a homogeneous store's book is its own file (keyed None)"),
    "store/manifest.py": (1, "Manifest, the one-type view of the one schema, refuses others"),
    "store/info.py": (1, "a homogeneous store's sizes keep their None-keyed form"),
    "store/writer.py": (1, "the one writer: a graph numbered per type gets a folder per type"),
    "loader/node_loader.py": (1, "PyG's NeighborLoader takes Data or HeteroData"),
    "loader/link_loader.py": (1, "PyG's LinkNeighborLoader takes Data or HeteroData"),
    "distributed/pyg_format.py": (1, "PyG's batches: Data on one type, HeteroData on many"),
    "models/pyg.py": (1, "the PyG export of a typed run is to_hetero(model)"),
    "outputs.py": (1, "an outputs file of several types has a node_type column"),
    # -- the run's one dispatch, per command
    "commands/_train_types.py": (2, "gnnsys train's switch to a typed RunConfig"),
    "commands/_preflight.py": (
        2,
        "a store's kind is read from its manifest, a dataset's from its files",
    ),
    "commands/partition.py": (1, "the dataset's kind is read from its files"),
    "commands/bench_partition.py": (1, "the dataset's kind is read from its files"),
    "commands/bench_comm.py": (3, "the benchmark's grid differs for typed datasets"),
    "commands/export_model.py": (1, "a typed run exports to_hetero(model)"),
    "commands/store.py": (1, "a typed store's verify line names its types and relations"),
    "train/control/prepare.py": (1, "the store is written from a dataset of either kind"),
    "train/control/run.py": (
        2,
        "a typed run resolves its codec per node type and its input width from its layout",
    ),
}
"""The rule: a branch whose condition names the graph's kind (an identifier containing
``hetero`` or ``typed``: ``is_hetero_store(...)``, ``isinstance(x, HeteroData)``,
``info.typed``; ``config.node_types is None``; ``manifest.kind == "typed"``)
stands only where the kind is a real parameter: where files or user objects are read and their
kind decided, and at the run's one dispatch. Everywhere else the runtime is keyed by node type.
The counts are ceilings: lower one when a branch goes."""


def _kind_branches(path: Path) -> int:
    """``if``/``while``/conditional expressions whose test names the graph's kind."""
    count = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.If | ast.IfExp | ast.While):
            continue
        inner = {id(sub.value) for sub in ast.walk(node.test) if isinstance(sub, ast.Attribute)}
        if any(_is_kind_test(sub) for sub in ast.walk(node.test) if id(sub) not in inner):
            count += 1
    return count


def _is_kind_test(node: ast.AST) -> bool:
    """An identifier naming the kind (``hetero`` or ``typed``, not an attribute's owner), a run's
    ``node_types`` settings tested against ``None`` (``RunConfig.node_types is None``: a typed
    run; the field was ``RunConfig.hetero``), or a store manifest's ``kind`` compared with
    ``"typed"``/``"homogeneous"``."""
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute):
        nones = all(isinstance(c, ast.Constant) and c.value is None for c in node.comparators)
        if node.left.attr == "node_types" and nones:
            return True
        kinds = {c.value for c in node.comparators if isinstance(c, ast.Constant)}
        if node.left.attr == "kind" and kinds & {"typed", "homogeneous"}:
            return True  # a store manifest's kind
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return bool(name and ("hetero" in name.lower() or "typed" in name.lower()))


def test_kind_branches_only_where_the_kind_is_a_parameter() -> None:
    found = {str(p.relative_to(PKG)): _kind_branches(p) for p in modules()}
    over = {
        rel: (n, KIND_BRANCHES.get(rel, (0, ""))[0])
        for rel, n in found.items()
        if n > KIND_BRANCHES.get(rel, (0, ""))[0]
    }
    assert not over, (
        f"branches on the graph's kind (found, allowed): {over}; key the code by node type "
        "(a homogeneous graph is the one-type case) or add the module to KIND_BRANCHES with the "
        "reason the kind is a real parameter there"
    )
    stale = {
        rel: n for rel, n in found.items() if rel in KIND_BRANCHES and n < KIND_BRANCHES[rel][0]
    }
    assert not stale, f"lower these ceilings in KIND_BRANCHES to the counts found: {stale}"

"""Design rules of STYLE.md, checked by parsing the source: layering, size budget, public API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gnnsys

PKG = Path(gnnsys.__file__).parent
BASE = {"types", "errors"}
STAGES = ["datasets", "partitioners", "store", "sampler", "cache", "loader"]
ALLOWED: dict[str, set[str]] = {"types": {"errors"}, "errors": set(), "kernels": set(BASE)}
for i, stage in enumerate(STAGES):
    ALLOWED[stage] = BASE | set(STAGES[:i])
ALLOWED["cache"] |= {"kernels"}
ALLOWED["loader"] |= {"kernels"}
ALLOWED["models"] = BASE | {"kernels"}
RAY_IMPORTERS = {"train"}
TRITON_IMPORTERS = {"kernels"}


def modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def top_unit(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0].removesuffix(".py")


def imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_import_layering(path: Path) -> None:
    unit = top_unit(path)
    for name in imported(path):
        root = name.split(".")[0]
        if root == "ray":
            assert unit in RAY_IMPORTERS, f"{path} imports ray; only gnnsys/train/ may"
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

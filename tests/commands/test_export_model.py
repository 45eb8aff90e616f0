"""``gnnsys export-model``: PyG's own GraphSAGE/GCN/GAT with a run's weights gives the logits of
gnnsys's sharded exact evaluation on the whole graph."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnsys.cli import main
from gnnsys.config import RunConfig
from gnnsys.datasets import load
from gnnsys.datasets.link_split import LinkSplitConfig
from gnnsys.models.pyg import PYG_MODELS, load_pyg
from gnnsys.store.info import store_info
from gnnsys.train.control.checkpoint import load_checkpoint
from gnnsys.train.control.local_group import LocalWorkerGroup
from gnnsys.train.control.run import train_local, worker_template
from gnnsys.train.eval.evaluate import SPLITS
from gnnsys.train.link.config import LinkConfig
from tests.train.run_configs import sbm_run

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

NODES, FEATURES = 400, 12


def _run(tmp_path: Path, model: str, **over: Any) -> tuple[RunConfig, Path]:
    cfg = sbm_run(
        num_nodes=NODES,
        num_features=FEATURES,
        parts=2,
        fanouts=(4, 3),
        hidden=8,
        batch_size=64,
        epochs=1,
        model=model,
    )
    cfg = replace(cfg, **over)
    train_local(cfg, tmp_path / "run")
    return cfg, tmp_path / "run"


def _sharded_outputs(cfg: RunConfig, run: Path) -> torch.Tensor:
    """Every node's last-layer outputs from gnnsys's sharded exact evaluation of the checkpoint."""
    store = run / "store"
    group = LocalWorkerGroup(worker_template(cfg, store, store_info(store), "partitioned"), 60.0)
    try:
        group.start()
        ckpt = load_checkpoint(run)
        assert ckpt is not None
        group.load(ckpt)
        reports = group.evaluate(SPLITS, with_logits=True)
    finally:
        group.stop()
    rows: dict[int, np.ndarray] = {}
    for report in reports:
        assert report.logits is not None
        gid, logits = report.logits
        rows |= dict(zip(gid.tolist(), logits, strict=True))
    assert sorted(rows) == list(range(NODES))
    return torch.from_numpy(np.stack([rows[i] for i in range(NODES)]))


def _whole_graph() -> tuple[torch.Tensor, torch.Tensor]:
    graph = load("synthetic:sbm", num_nodes=NODES, num_features=FEATURES)
    assert graph.x is not None
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    edge_index = torch.from_numpy(np.stack([graph.indices, dst]).astype(np.int64))
    assert not bool((edge_index[0] == edge_index[1]).any())  # no self loops (pyg.py docstring)
    return torch.from_numpy(np.asarray(graph.x, dtype=np.float32)), edge_index


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_pyg_model_gives_the_exact_evaluation_logits(model: str, tmp_path: Path) -> None:
    cfg, run = _run(tmp_path, model)
    out = tmp_path / "pyg"
    assert main(["export-model", str(run), "--out", str(out)]) == 0
    exported = load_pyg(out)
    assert type(exported.model).__name__ == PYG_MODELS[model]
    assert exported.decoder is None and exported.spec["run"]["epoch"] == 0
    x, edge_index = _whole_graph()
    with torch.no_grad():
        got = exported.model(x, edge_index)
    expected = _sharded_outputs(cfg, run)
    assert float((got - expected).abs().max()) <= 1e-5


@pytest.mark.timeout(300)
def test_link_run_exports_its_encoder_and_decoder(tmp_path: Path) -> None:
    cfg0 = sbm_run(
        num_nodes=NODES, num_features=FEATURES, parts=2, fanouts=(4, 3), hidden=8,
        batch_size=64, epochs=1,
    )  # fmt: skip
    data = replace(cfg0.data, link_split=LinkSplitConfig(val=0.1, test=0.1, num_neg=20, seed=1))
    cfg, run = _run(tmp_path, "sage", data=data, link=LinkConfig(decoder="mlp"))
    out = tmp_path / "pyg"
    assert main(["export-model", str(run), "--out", str(out)]) == 0
    exported = load_pyg(out)
    assert exported.spec["decoder"] == "mlp" and exported.decoder is not None
    ckpt = load_checkpoint(run)
    assert ckpt is not None
    for key, value in exported.decoder.state_dict().items():
        assert torch.equal(value, ckpt.model_state[f"decoder.{key}"])
    for key, value in exported.model.state_dict().items():
        assert torch.equal(value, ckpt.model_state["encoder." + key.replace("convs.", "layers.")])


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["export-model", str(tmp_path), "--out", str(tmp_path / "o"), "--format", "onnx"])
    assert main(["export-model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert main(["export-model", str(tmp_path), "--out", str(tmp_path / "o")]) == 2


def test_a_corrupt_export_is_refused(tmp_path: Path) -> None:
    from gnnsys.models.pyg import encode_pyg

    spec = {"format": 1, "pyg_model": "GCN", "kwargs": {"in_channels": 3, "hidden_channels": 4,
            "num_layers": 1, "out_channels": 4, "dropout": 0.0}, "decoder": None}  # fmt: skip
    tensors = {"convs.0.lin.weight": torch.ones(4, 3), "convs.0.bias": torch.ones(4)}
    for name, data in encode_pyg(spec, tensors).items():
        (tmp_path / name).write_bytes(data)
    assert load_pyg(tmp_path).model.convs[0].bias.sum() == 4
    data = bytearray((tmp_path / "model.pt").read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / "model.pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_pyg(tmp_path)
    spec_file = json.loads((tmp_path / "model.json").read_text())
    assert spec_file["xxh3_128"] and spec_file["model_file"] == "model.pt"


@pytest.mark.timeout(300)
def test_typed_run_exports_to_hetero_with_its_embeddings(tmp_path: Path) -> None:
    import gnnsys.outputs as outputs
    from gnnsys.datasets import load_hetero

    mag = ["synthetic:mag", "-D", "scale=0.002", "-D", "reverse=true"]
    run = tmp_path / "run"
    flags = ["--parts", "2", "--epochs", "1", "--executor", "local", "--hidden", "16"]
    assert (
        main(["train", *mag, *flags, "--fanouts", "4,3", "--no-progress", "--out", str(run)]) == 0
    )
    assert main(["export-model", str(run), "--out", str(tmp_path / "pyg")]) == 0
    exported = load_pyg(tmp_path / "pyg")
    assert exported.spec["to_hetero"] and set(exported.embeddings) == {
        "author", "institution", "field_of_study"
    }  # fmt: skip
    graph = load_hetero("synthetic:mag", scale=0.002, reverse=True)
    x_dict = {t: exported.embeddings.get(t) for t in graph.node_types}
    x_dict["paper"] = torch.from_numpy(np.asarray(graph.nodes["paper"].x, dtype=np.float32))
    edge_index_dict = {
        et: torch.from_numpy(
            np.stack(
                [rel.indices, np.repeat(np.arange(rel.indptr.shape[0] - 1), np.diff(rel.indptr))]
            ).astype(np.int64)  # fmt: skip
        )
        for et, rel in graph.relations.items()
    }
    with torch.no_grad():
        got = exported.model(x_dict, edge_index_dict)
    # gnnsys's exact sharded inference of the same checkpoint: the last layer's outputs
    assert main(["embed", str(run), "--out", str(tmp_path / "emb"), "--layer", "2"]) == 0
    table = outputs.open(tmp_path / "emb").read()
    types = np.asarray(table["node_type"].to_numpy(zero_copy_only=False))
    ids = table["id"].to_numpy()
    rows = np.stack(table["embedding"].to_numpy(zero_copy_only=False))
    for node_type, out in got.items():
        mine = types == node_type
        expected = np.zeros_like(out.numpy())
        expected[ids[mine]] = rows[mine]
        assert mine.sum() == out.shape[0]
        assert float(np.abs(out.numpy() - expected).max()) <= 1e-5, node_type

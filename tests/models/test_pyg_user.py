"""``gnnsys train --model <any PyG BasicGNN>``: trained, predicted and exported as PyG's model.

Each model trains on 2 partitioned ranks; ``gnnsys predict`` then writes its probabilities, and
``gnnsys export-model`` a plain PyG state dict. The exported model run by PyG itself over the
whole graph gives the predicted probabilities (float32 sums in another order: 1e-5), so the
runtime ran the PyG model's own arithmetic (convs, norms, activations, ``lin``) layer by layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnsys.outputs as outputs
from gnnsys.cli import main
from gnnsys.models.pyg import load_pyg
from gnnsys.store import assemble_hetero
from gnnsys.types import ONE_RELATION, ONE_TYPE

pytestmark = pytest.mark.usefixtures("shared_stores")

SBM = ["synthetic:sbm", "-D", "num_nodes=600", "-D", "num_features=12"]
SMALL = ["--hidden", "16", "--fanouts", "4,4", "--batch-size", "64", "--no-progress"]
MODELS = {
    "GraphSAGE": [],
    "GCN": [],
    "GAT": ["--model-arg", "heads=2", "--model-arg", "norm=batch_norm"],
    "GIN": ["--model-arg", "jk=last", "--model-arg", "act=elu"],
    "EdgeCNN": [],
    "tests.models.pyg_factory:gin": [],
    "GraphSAGE jk=cat": ["--model-arg", "jk=cat"],
    "GCN jk=lstm": ["--model-arg", "jk=lstm", "--fanouts", "4,4,4"],  # jk's own weights
    "GIN jk=max": ["--model-arg", "jk=max", "--model-arg", "norm=batch_norm"],
}


def _whole_graph_probs(run: Path, export: Path) -> np.ndarray:
    model = load_pyg(export).model
    graph = assemble_hetero(run / "store")
    x = torch.as_tensor(np.asarray(graph.nodes[ONE_TYPE].x))
    rel = graph.relations[ONE_RELATION]
    dst = np.repeat(np.arange(len(rel.indptr) - 1), np.diff(rel.indptr))
    edge_index = torch.from_numpy(np.stack([np.asarray(rel.indices, np.int64), dst]))
    with torch.no_grad():
        return torch.softmax(model(x, edge_index), dim=1).numpy()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(MODELS))
def test_a_pyg_model_trains_predicts_and_exports_as_itself(name: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    code = main(["train", *SBM, "--parts", "2", "--topology", "partitioned", "--epochs", "1",
                 "--executor", "local", "--model", name.split()[0], "--out", str(run), *SMALL,
                 *MODELS[name]])  # fmt: skip
    assert code == 0
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert np.isfinite(last["loss"])
    if name == "GraphSAGE":  # each rank's work and its balance (max over mean)
        train = assemble_hetero(run / "store").nodes[ONE_TYPE].train_mask
        ranks = last["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert sum(r["seeds"] for r in ranks) == int(np.asarray(train).sum())
        assert all(r["sampled_edges"] > 0 and r["feature_bytes"] > 0 for r in ranks)
        assert set(last["balance"]) == {"seeds", "sampled_edges", "feature_bytes", "compute_s"}
        assert all(1.0 <= v <= 2.0 for v in last["balance"].values())
    assert main(["predict", str(run), "--out", str(tmp_path / "pred")]) == 0
    assert main(["export-model", str(run), "--out", str(tmp_path / "pyg")]) == 0
    got = outputs.open(tmp_path / "pred").rows(np.arange(600))
    torch.testing.assert_close(
        torch.from_numpy(got), torch.from_numpy(_whole_graph_probs(run, tmp_path / "pyg")),
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip
    if name.startswith("GIN") or name.startswith("GCN"):  # the last layer's input rows
        assert main(["embed", str(run), "--out", str(tmp_path / "emb")]) == 0
        emb = outputs.open(tmp_path / "emb").rows(np.arange(600))
        width = 32 if name == "GCN jk=lstm" else 16  # jk: [h_0 | h_1] of a 3-layer model
        assert emb.shape == (600, width) and np.isfinite(emb).all()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--model", "Foo"], "not a gnnsys model .* BasicGNN .*GraphSAGE"),
        (["--model", "GIN", "--model-arg", "jk=sum"], "jk='sum'; choose one of .*cat, max, lstm"),
        (["--model", "GIN", "--model-arg", "nonsense"], "pass KEY=VALUE"),
        (["--model", "sage", "--model-arg", "jk=last"], "takes none"),
        (["--model", "tests.models.pyg_factory:linear"], "returned Linear, not a .*BasicGNN"),
        (["--model", "no_such_module:make"], "cannot import"),
    ],
)
@pytest.mark.timeout(120)
def test_bad_pyg_models_are_refused_with_the_fix(argv, match, tmp_path, capsys) -> None:
    code = main(["train", *SBM, "--parts", "2", "--epochs", "1", "--executor", "local",
                 "--out", str(tmp_path / "run"), *SMALL, *argv])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0
    assert __import__("re").search(match, err), err[-2000:]


@pytest.mark.timeout(120)
def test_a_typed_graph_refuses_a_pyg_model(tmp_path, capsys) -> None:
    code = main(["train", "synthetic:mag", "-D", "scale=0.002", "--parts", "2", "--epochs", "1",
                 "--executor", "local", "--model", "GIN", "--out", str(tmp_path / "run"),
                 "--no-progress"])  # fmt: skip
    assert code != 0
    assert "to_hetero" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name", ["GraphSAGE", "GCN", "GAT", "GIN", "EdgeCNN", "GraphSAGE jk=cat", "GIN jk=lstm"]
)
def test_hop_trimmed_equals_the_model_on_the_whole_batch(name: str, tiny_graph) -> None:
    """Outputs and gradients of ``HopTrimmed(model)`` are the untrimmed model's, exactly."""
    import torch_geometric.nn.models as pyg_models

    from gnnsys.loader import NeighborLoader
    from gnnsys.models.pyg_user import HopTrimmed

    batch = next(iter(NeighborLoader(tiny_graph.to_pyg(), [5, 3, 2], batch_size=64, seed=0)))
    torch.manual_seed(0)
    name, _, jk = name.partition(" jk=")
    kw: dict = {"heads": 2} if name == "GAT" else {}
    kw.update({"jk": jk} if jk else {})
    model = getattr(pyg_models, name)(16, 32, num_layers=3, out_channels=4, dropout=0.0, **kw)
    full = model(batch.x, batch.edge_index)[: batch.batch_size]
    full.square().sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    trimmed = HopTrimmed(model)
    got = trimmed(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    got.square().sum().backward()
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-6)  # fewer rows, same sums
    for g, w in zip((p.grad for p in model.parameters()), want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    assert list(trimmed.state_dict()) == [f"model.{k}" for k in model.state_dict()]
    with pytest.raises(ValueError, match="3-layer model needs a 3-hop batch"):
        trimmed(batch.x, batch.edge_index, batch.num_sampled_nodes[:3], [1, 2])

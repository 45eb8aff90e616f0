"""``gnnsys.distributed.inference`` on 2 gloo ranks against the model over the whole graph.

PyG's GraphSAGE (3 layers) runs layer-wise over the partitions (halo rows of every layer read
from their owner's file) and sampled with every neighbour; both equal ``model(x, edge_index)``
over the whole graph in one process, within float32 summation-order tolerance, for every node.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import distributed as dist

from gnnsys.partitioners import partition
from gnnsys.store import write_partitions
from tests.distributed.dist_loader_rank import infer_model
from tests.distributed.test_dist_loader import run_ranks


@pytest.fixture(scope="module")
def infer_run(tiny_graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("distinfer")
    store = root / "store"
    write_partitions(tiny_graph, partition(tiny_graph, "metis", 2, seed=0), store, num_hops=2)
    run_ranks(store, root, "infer")
    return store, root


def _whole_graph(tiny_graph, jk: str | None = None) -> np.ndarray:
    rel_indptr = np.asarray(tiny_graph.indptr)
    dst = np.repeat(np.arange(rel_indptr.size - 1), np.diff(rel_indptr))
    edge_index = torch.from_numpy(np.stack([np.asarray(tiny_graph.indices, np.int64), dst]))
    with torch.no_grad():
        return infer_model(jk)(torch.as_tensor(tiny_graph.x), edge_index).numpy()


@pytest.mark.timeout(200)
def test_layerwise_and_full_sampled_outputs_equal_the_whole_graph(infer_run, tiny_graph) -> None:
    from gnnsys.outputs import open as open_outputs

    _, root = infer_run
    want = _whole_graph(tiny_graph)
    ids = np.arange(tiny_graph.num_nodes)
    layerwise = open_outputs(root / "layerwise")
    assert layerwise.manifest["method"] == "layerwise" and layerwise.manifest["parts"] == 2
    assert layerwise.manifest["num_rows"] == tiny_graph.num_nodes
    torch.testing.assert_close(  # float32 sums in another order: 1e-5 relative
        torch.from_numpy(layerwise.rows(ids)), torch.from_numpy(want), rtol=1e-5, atol=1e-5
    )
    sampled = open_outputs(root / "sampled")
    assert sampled.manifest["kind"] == "predict" and sampled.manifest["method"] == "sampled"
    table = sampled.read()
    got_ids = table.column("id").to_numpy()
    np.testing.assert_array_equal(np.sort(got_ids), ids)  # every node once
    probs = np.exp(want - want.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    torch.testing.assert_close(
        torch.from_numpy(sampled.rows(ids)), torch.from_numpy(probs), rtol=1e-5, atol=1e-5
    )
    jk = open_outputs(root / "jk")  # jk='lstm': every layer's rows reach the last, exactly
    assert jk.manifest["method"] == "layerwise"
    torch.testing.assert_close(
        torch.from_numpy(jk.rows(ids)), torch.from_numpy(_whole_graph(tiny_graph, "lstm")),
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip
    assert not list(root.glob(".*partial"))  # staging directories are gone


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_bad_inference_settings_name_the_fix(group, tiny_graph, tmp_path) -> None:
    from torch_geometric.nn.models import GraphSAGE

    from gnnsys.distributed import inference

    store = tmp_path / "store"
    write_partitions(tiny_graph, partition(tiny_graph, "random", 1, seed=0), store, num_hops=1)
    model = GraphSAGE(16, 8, num_layers=2)
    with pytest.raises(ValueError, match=r"2 layers but num_neighbors=\[5, 5, 5\] has 3 hops"):
        inference(model, store, tmp_path / "out", num_neighbors=[5, 5, 5])
    with pytest.raises(TypeError, match="BasicGNN layer interface"):
        inference(torch.nn.Linear(16, 4), store, tmp_path / "out", method="layerwise")
    with pytest.raises(ValueError, match="needs num_neighbors"):
        inference(torch.nn.Linear(16, 4), store, tmp_path / "out")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    with pytest.raises(ValueError, match="not empty; pass overwrite=True"):
        inference(model, store, tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "keep"
    out = inference(model, store, tmp_path / "one", kind="embed")  # one rank: its own files
    assert out.joinpath("manifest.json").is_file()


@pytest.mark.timeout(300)
def test_a_to_hetero_model_runs_layer_by_layer_equal_to_the_whole_graph(tmp_path) -> None:
    """to_hetero(GraphSAGE) (3 layers, mean over relations, batch norm, featureless types given
    as embedding rows) on 2 ranks of a typed store equals the model over the whole graph."""
    from gnnsys.outputs import open as open_outputs
    from tests.distributed.dist_loader_rank import hetero_infer_model
    from tests.distributed.test_dist_loader import typed_run

    mag, store, _ = typed_run(tmp_path, "typed-infer")
    model, emb = hetero_infer_model(str(store))
    x_dict = {t: torch.as_tensor(np.asarray(n.x)) for t, n in mag.nodes.items() if t not in emb}
    x_dict.update(emb)
    edges = {}
    for et, rel in mag.relations.items():
        dst = np.repeat(np.arange(len(rel.indptr) - 1), np.diff(rel.indptr))
        edges[tuple(et)] = torch.from_numpy(np.stack([np.asarray(rel.indices, np.int64), dst]))
    with torch.no_grad():
        want = model(x_dict, edges)["paper"]
    ids = np.arange(mag.nodes["paper"].num_nodes)
    for method in ("layerwise", "sampled"):
        got = open_outputs(tmp_path / f"typed-{method}")
        assert got.manifest["method"] == method and got.manifest["num_layers"] == 3
        torch.testing.assert_close(  # float32 sums in another order: 1e-5
            torch.from_numpy(got.rows(ids, node_type="paper")), want, rtol=1e-5, atol=1e-5
        )


@pytest.mark.timeout(200)
def test_bad_to_hetero_inference_names_the_fix(group, tmp_path) -> None:
    from torch_geometric.nn import to_hetero
    from torch_geometric.nn.models import GraphSAGE

    from gnnsys.datasets.mag import synthetic_mag
    from gnnsys.distributed import inference
    from gnnsys.partitioners import partition_hetero
    from gnnsys.store import write_partitions

    mag = synthetic_mag(0.002, reverse=True)
    store = tmp_path / "store"
    write_partitions(mag, partition_hetero(mag, "random", 1, 0), store, num_hops=1)
    meta = (list(mag.nodes), [tuple(et) for et in mag.relations])
    kw = {"input_type": "paper"}
    with pytest.raises(TypeError, match=r"to_hetero\(BasicGNN\) model; Linear is not one"):
        inference(torch.nn.Linear(4, 4), store, tmp_path / "a", method="layerwise", **kw)
    jk = to_hetero(GraphSAGE((-1, -1), 8, num_layers=2, out_channels=3, jk="cat"), meta)
    with pytest.raises(ValueError, match="takes jk=None; pass method='sampled'"):
        inference(jk, store, tmp_path / "b", **kw)
    model = to_hetero(GraphSAGE((-1, -1), 8, num_layers=2, out_channels=3), meta).eval()
    x = {t: torch.zeros(1, 128 if t == "paper" else 8) for t in meta[0]}
    model(x, {et: torch.zeros(2, 0, dtype=torch.int64) for et in meta[1]})
    with pytest.raises(ValueError, match=r"'author' has no features: pass embeddings=\{'author'"):
        inference(model, store, tmp_path / "c", **kw)
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob(".c*"))  # nothing left

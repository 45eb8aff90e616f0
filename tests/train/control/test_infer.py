"""``gnnsys predict`` / ``gnnsys embed``: outputs written by the ranks, checked as a user would.

- predictions read back from the files give exactly the run's reported test accuracy
  (homogeneous and heterogeneous runs, local and Ray executors);
- embeddings on another partition of the same graph (4 parts) equal the run's own (1 part) to
  1e-5;
- ``--nodes`` restricts, bad inputs are refused with the reason, nothing is half-written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gnnsys.outputs as outputs
from gnnsys.cli import main
from gnnsys.config import RunConfig
from gnnsys.datasets import load, load_hetero
from gnnsys.train.control.infer import infer as _infer

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)


def infer(run: Path, out: Path, **kw: Any) -> Any:
    return _infer(run, out, RunConfig.from_run_dir(run), **kw)


SBM = ["synthetic:sbm", "-D", "num_nodes=800", "-D", "num_features=16"]
MAG = ["synthetic:mag", "-D", "scale=0.002", "-D", "reverse=true"]
SMALL = ["--hidden", "16", "--fanouts", "5,5", "--batch-size", "64", "--no-progress"]


def _train(out: Path, dataset: list[str], parts: int, *extra: str) -> dict[str, Any]:
    code = main(["train", *dataset, "--parts", str(parts), "--epochs", "2", "--executor",
                 "local", "--out", str(out), *SMALL, *extra])  # fmt: skip
    assert code == 0
    return dict(json.loads((out / "metrics.jsonl").read_text().splitlines()[-1]))


def _accuracy(out: Path, y: np.ndarray, test_mask: np.ndarray) -> float:
    table = outputs.open(out).read(columns=["id", "pred"])
    pred = np.full(y.shape[0], -1, dtype=np.int64)
    pred[table["id"].to_numpy()] = table["pred"].to_numpy()
    mask = test_mask & (y >= 0)
    return float((pred[mask] == y[mask]).mean())


@pytest.fixture(scope="module")
def sbm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    run = tmp_path_factory.mktemp("sbm") / "run"
    return run, _train(run, SBM, 1)


@pytest.mark.timeout(300)
def test_predict_gives_the_reported_test_accuracy(
    sbm_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    run, last = sbm_run
    assert main(["predict", str(run), "--out", str(tmp_path / "pred")]) == 0
    got = outputs.open(tmp_path / "pred")
    table = got.read()
    graph = load("synthetic:sbm", num_nodes=800, num_features=16)
    assert sorted(table["id"].to_pylist()) == list(range(graph.num_nodes))
    probs = np.stack(table["probs"].to_numpy(zero_copy_only=False))
    assert np.allclose(probs.sum(1), 1.0, atol=1e-5)
    assert (probs.argmax(1) == table["pred"].to_numpy()).all()
    assert got.manifest["kind"] == "predict" and got.manifest["run"]["epoch"] == 1
    assert graph.y is not None
    assert _accuracy(tmp_path / "pred", graph.y, graph.test_mask) == last["test_acc"]


@pytest.mark.timeout(300)
def test_embed_on_four_parts_equals_one_part(
    sbm_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    run, _ = sbm_run
    store4 = tmp_path / "store4"
    assert main(["partition", *SBM, "--parts", "4", "--method", "metis", "--out", str(store4)]) == 0
    assert main(["embed", str(run), "--out", str(tmp_path / "e1")]) == 0
    assert main(["embed", str(run), "--out", str(tmp_path / "e4"), "--store", str(store4)]) == 0
    one, four = outputs.open(tmp_path / "e1"), outputs.open(tmp_path / "e4")
    assert one.manifest["layer"] == 1 and four.manifest["parts"] == 4
    rows = {}
    for name, got in (("one", one), ("four", four)):
        table = got.read()
        order = np.argsort(table["id"].to_numpy())
        rows[name] = np.stack(table["embedding"].to_numpy(zero_copy_only=False))[order]
    assert rows["one"].shape == (800, 16)
    assert float(np.abs(rows["one"] - rows["four"]).max()) <= 1e-5


@pytest.mark.timeout(300)
def test_typed_run_predict_and_embed(tmp_path: Path) -> None:
    last = _train(tmp_path / "run", MAG, 2)
    graph = load_hetero("synthetic:mag", scale=0.002, reverse=True)
    paper = graph.nodes["paper"]
    assert paper.y is not None and paper.test_mask is not None
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "pred")]) == 0
    table = outputs.open(tmp_path / "pred").read()
    assert set(table["node_type"].to_pylist()) == {"paper"}
    assert table.num_rows == paper.num_nodes
    assert _accuracy(tmp_path / "pred", paper.y, paper.test_mask) == last["test_acc"]
    assert main(["embed", str(tmp_path / "run"), "--out", str(tmp_path / "emb")]) == 0
    emb = outputs.open(tmp_path / "emb").read()
    counts = dict(zip(*np.unique(emb["node_type"].to_numpy(zero_copy_only=False),
                                 return_counts=True), strict=True))  # fmt: skip
    assert counts == {t: n.num_nodes for t, n in graph.nodes.items()}  # reverse: every type
    store4 = tmp_path / "store4"
    assert main(["partition", *MAG, "--parts", "4", "--out", str(store4)]) == 0
    # the featureless types' learned rows follow their nodes to the 4-part ranks (reshard)
    infer(tmp_path / "run", tmp_path / "e4", kind="embed", store=store4)
    four = outputs.open(tmp_path / "e4").read()
    assert four.num_rows == emb.num_rows
    for node_type in graph.nodes:
        want = outputs.open(tmp_path / "emb").rows(
            np.arange(graph.nodes[node_type].num_nodes), node_type
        )
        got = outputs.open(tmp_path / "e4").rows(
            np.arange(graph.nodes[node_type].num_nodes), node_type
        )
        assert float(np.abs(got - want).max()) <= 1e-5, node_type


@pytest.mark.timeout(300)
def test_nodes_restrict_and_refusals(sbm_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    run, _ = sbm_run
    (tmp_path / "ids.txt").write_text("5\n3\n700\n")
    out = tmp_path / "some"
    assert main(["predict", str(run), "--out", str(out), "--nodes", str(tmp_path / "ids.txt")]) == 0
    assert sorted(outputs.open(out).read()["id"].to_pylist()) == [3, 5, 700]
    assert main(["predict", str(run), "--out", str(out)]) == 2  # not empty, no --overwrite
    assert main(["embed", str(run), "--out", str(tmp_path / "e"), "--layer", "3"]) == 2
    other = tmp_path / "other"
    assert main(["partition", "synthetic:sbm", "-D", "num_nodes=900", "-D", "num_features=16",
                 "--parts", "2", "--out", str(other)]) == 0  # fmt: skip
    with pytest.raises(ValueError, match=r"not one run's \(.*store.graph"):
        infer(run, tmp_path / "x", kind="embed", store=other)
    assert not (tmp_path / "x").exists() and not (tmp_path / ".x.partial").exists()


@pytest.mark.timeout(300)
def test_a_failed_rank_leaves_nothing_and_a_corrupt_part_is_refused(
    sbm_run: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, _ = sbm_run
    import gnnsys.train.worker as worker

    def fail(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(worker, "write_part", fail)
    with pytest.raises(Exception, match="disk full"):
        infer(run, tmp_path / "out", kind="predict")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.undo()
    infer(run, tmp_path / "out", kind="predict")
    part = tmp_path / "out" / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        outputs.open(tmp_path / "out").read()
    with pytest.raises(ValueError, match="manifest.json is missing"):
        outputs.open(tmp_path)


@pytest.mark.timeout(300)
def test_ray_executor_writes_the_same_rows(
    ray_session: Any, sbm_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    run, _ = sbm_run
    local = infer(run, tmp_path / "local", kind="embed")
    remote = infer(run, tmp_path / "ray", kind="embed", executor="ray")
    assert [f["xxh3_128"] for f in local.manifest["files"]] == [
        f["xxh3_128"] for f in remote.manifest["files"]
    ]


@pytest.mark.timeout(300)
def test_link_run_embeddings_and_scores(tmp_path: Path) -> None:
    import torch

    from gnnsys.models.link import MLPDecoder
    from gnnsys.train.control.checkpoint import load_checkpoint

    _train(tmp_path / "run", SBM, 2, "--task", "link", "--decoder", "mlp")
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "p")]) == 2
    assert main(["embed", str(tmp_path / "run"), "--out", str(tmp_path / "emb")]) == 0
    got = outputs.open(tmp_path / "emb")
    assert got.manifest["layer"] == 2 and got.manifest["decoder"]["name"] == "mlp"
    src, dst = np.array([0, 7, 11]), np.array([5, 7, 400])
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt is not None
    decoder = MLPDecoder(16)
    decoder.load_state_dict(
        {k.removeprefix("decoder."): v for k, v in ckpt.model_state.items() if "decoder." in k}
    )
    with torch.no_grad():
        h_src, h_dst = (torch.from_numpy(got.rows(i)) for i in (src, dst))
        expected = decoder(h_src, h_dst).numpy()
    assert np.array_equal(got.score(src, dst), expected)
    with pytest.raises(ValueError, match=r"ids \[900\] have no row"):
        got.rows([1, 900])

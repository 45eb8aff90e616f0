"""The cost of a lossy ``--eval-codec``: metrics and bytes of the same weights, per codec.

Trains ``--epochs`` epochs of SAGE on a ``--parts``-part METIS store with the in-process
executor, then evaluates those weights sharded once per evaluation codec (fp32, fp16, bf16, int8,
int4). fp32 is exact; the others compress the halo embeddings of layers >= 1 that ranks exchange.
Prints one JSON line per codec: every split's accuracy and macro-F1, the evaluation bytes, and
the difference to fp32 in points.

Usage::

    python benchmarks/eval_codec.py --dataset planetoid:cora --root ../shared/datasets
    python benchmarks/eval_codec.py --dataset musae:facebook --root ../shared/datasets
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from gnnsys.config import RunConfig
from gnnsys.datasets import load
from gnnsys.partitioners import partition
from gnnsys.sampler import NeighborSampler
from gnnsys.store import write_partitions
from gnnsys.store.info import store_info
from gnnsys.store.source import DataConfig
from gnnsys.train.control.cluster_config import ClusterConfig
from gnnsys.train.control.local_group import LocalWorkerGroup
from gnnsys.train.control.run import worker_template
from gnnsys.train.eval.evaluate import SPLITS, EvalConfig, combine_evals

CODECS = ("fp32", "fp16", "bf16", "int8", "int4")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic:sbm")
    parser.add_argument("--root")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    graph = load(args.dataset, root=args.root)
    with tempfile.TemporaryDirectory(prefix="gnnsys-eval-codec-") as tmp:
        store = Path(tmp) / "store"
        assignment = partition(graph, "metis", args.parts, seed=0)
        write_partitions(graph, assignment, store, num_hops=2)
        base = RunConfig(
            data=DataConfig(store=str(store)),
            cluster=ClusterConfig(parts=args.parts),
            sampler=NeighborSampler.Config(fanouts=(10, 5)),
        )
        info = store_info(store)
        group = LocalWorkerGroup(worker_template(base, store, info, "partitioned"), 600.0)
        num_batches = group.start()
        for epoch in range(args.epochs):
            group.run_epoch(epoch, num_batches, lambda _: None)
        state = group.collect()
        group.stop()
        reference: dict[str, float | None] = {}
        for codec in CODECS:
            cfg = replace(base, eval=EvalConfig(codec=codec))
            evaluator = LocalWorkerGroup(worker_template(cfg, store, info, "partitioned"), 600.0)
            evaluator.start()
            for rank, w in enumerate(evaluator.workers):
                w.load_state(state[rank].model, state[rank].optimizer, state[rank].rng)
            result = combine_evals(evaluator.evaluate(SPLITS), info.num_classes)
            evaluator.stop()
            reference = reference or result.metrics
            diff = {
                f"{k}_diff_pt": round(100 * (float(v or 0) - float(reference[k] or 0)), 3)
                for k, v in result.metrics.items()
            }
            line = {
                "bench": "eval_codec",
                "dataset": args.dataset,
                "parts": args.parts,
                "codec": codec,
                **{k: round(float(v or 0), 5) for k, v in result.metrics.items()},
                "eval_bytes": sum(result.traffic.bytes.values()),
                **diff,
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

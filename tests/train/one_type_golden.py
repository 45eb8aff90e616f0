"""Record the node runtime's one-type runs, so the typed runtime can be held to them after it goes.

``tests/train/test_rank_one_type.py`` (then ``tests/train/hetero/test_one_type.py``) showed
run by run that the typed runtime trains a homogeneous store exactly as the node runtime
(``NodeRank``) did. Issue 23 then deleted the node runtime; what it gave is kept here: per case
its history (as ``_history`` compares it) and a sha256 of every final weight tensor, written by
this script from the last commit that still had ``NodeRank``, fb668de (then at
``tests/train/hetero/``)::

    python -m tests.train.hetero.one_type_golden   # from the repository root, at fb668de

The figures are those of this repository's pinned CPU torch (``.ci/constraints.txt``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

GOLDEN = Path(__file__).with_name("one_type_golden.json")


def weight_digests(model_state: dict[str, torch.Tensor]) -> dict[str, str]:
    """Name -> sha256 of the tensor's dtype, shape and bytes (model order)."""
    out = {}
    for name, value in model_state.items():
        t = value.detach().cpu().contiguous()
        h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
        out[name] = h.hexdigest()
    return out


def main() -> None:
    from gnnsys.train.control.checkpoint import load_checkpoint
    from gnnsys.train.control.run import train_local
    from tests.train.test_rank_one_type import _cases, _history, _link_case

    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cases = {name: (cfg, None) for name, cfg in _cases().items()}
        cases["link"] = _link_case(Path(tmp) / "link")
        for name, (cfg, _) in sorted(cases.items()):
            out = Path(tmp) / name
            result = train_local(cfg, out)
            ckpt = load_checkpoint(out)
            assert ckpt is not None
            runs[name] = {
                "history": _history(result.history, name),
                "weights": weight_digests(ckpt.model_state),
            }
            print(name, file=sys.stderr)
    GOLDEN.write_text(json.dumps({"torch": torch.__version__, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()

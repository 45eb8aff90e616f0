from __future__ import annotations

import pickle

import pytest
import torch

from gnnsys.cache.codecs import CODECS, AutoCodec, concat, make_codec, put, take
from gnnsys.cache.codecs.binary import BinaryCodec
from gnnsys.cache.codecs.int4 import Int4Codec, pack_nibbles, unpack_nibbles
from gnnsys.cache.codecs.int8 import Int8Codec
from gnnsys.cache.codecs.wire import WIRE_METHODS, wire_compress, wire_decompress

FIXED = ["fp32", "fp16", "bf16", "int8", "int4"]


def features(n: int = 300, f: int = 37, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=gen) * torch.rand(n, 1, generator=gen) * 4
    x[0] = 0.0  # an all-zero row
    x[1] = 2.5  # a constant row
    x[2, :] = torch.linspace(-1000, 1000, f)  # a wide row
    return x


def row_range(x: torch.Tensor) -> torch.Tensor:
    return x.max(dim=1).values - x.min(dim=1).values


@pytest.mark.parametrize(("name", "levels"), [("int8", 255), ("int4", 15)])
def test_affine_error_at_most_half_step_of_row_range(name: str, levels: int) -> None:
    x = features()
    codec = make_codec(name)
    err = (codec.decode(codec.encode(x)) - x).abs().max(dim=1).values
    # step is range/levels rounded up to fp16 (rel. 2**-10); rows with |x| >> range (the
    # constant row) use maxabs/1900 instead, documented in int8.py.
    maxabs = x.abs().max(dim=1).values
    step = torch.maximum(row_range(x) / levels, maxabs / 1900.0) * (1 + 2**-10)
    bound = 0.5 * step + 1e-6 * maxabs
    worst = int(torch.argmax(err - bound))
    assert bool((err <= bound).all()), f"row {worst}: err {err[worst]} > bound {bound[worst]}"
    spread = row_range(x) > maxabs / 7.4  # ordinary rows: the bound is exactly range/levels/2
    pure = 0.5 * row_range(x) / levels * (1 + 2**-10) + 1e-6 * maxabs
    assert bool((err[spread] <= pure[spread]).all())


@pytest.mark.parametrize("name", ["int8", "int4"])
def test_affine_dequant_layout_is_the_kernel_formula(name: str) -> None:
    x = features(50, 16)
    enc = make_codec(name).encode(x)
    assert enc.scale is not None and enc.zero is not None
    assert enc.scale.dtype == torch.float16 and enc.zero.dtype == torch.float16
    q = enc.data if name == "int8" else unpack_nibbles(enc.data, 16)
    assert enc.data.dtype == (torch.int8 if name == "int8" else torch.uint8)
    ref = (q.float() - enc.zero.float()[:, None]) * enc.scale.float()[:, None]
    assert torch.equal(make_codec(name).decode(enc), ref)
    if name == "int4":
        assert int(q.max()) <= 15 and enc.data.shape == (50, 8)


@pytest.mark.parametrize(("name", "rel"), [("fp16", 2.0**-11), ("bf16", 2.0**-8)])
def test_half_precision_round_trip_to_dtype_precision(name: str, rel: float) -> None:
    x = features()
    x[2] = torch.linspace(-100, 100, 37)
    got = make_codec(name).decode(make_codec(name).encode(x))
    assert bool(((got - x).abs() <= rel * x.abs() + 1e-7).all())


def test_fp32_exact_and_fp16_overflow_rejected() -> None:
    x = features()
    assert torch.equal(make_codec("fp32").decode(make_codec("fp32").encode(x)), x)
    with pytest.raises(ValueError, match="cannot hold"):
        make_codec("fp16").encode(torch.full((2, 2), 1e6))


def test_binary_exact_and_rejects_non_binary() -> None:
    x = (torch.rand(40, 4714, generator=torch.Generator().manual_seed(1)) < 0.01).float()
    codec = BinaryCodec()
    enc = codec.encode(x)
    assert enc.data.shape == (40, 590) and torch.equal(codec.decode(enc), x)
    import numpy as np

    ref = np.packbits(x.numpy().astype(np.uint8), axis=1, bitorder="little")
    assert np.array_equal(enc.data.numpy(), ref)
    with pytest.raises(ValueError, match="0/1"):
        codec.encode(torch.tensor([[0.5, 1.0]]))


@pytest.mark.parametrize("name", FIXED + ["binary"])
@pytest.mark.parametrize("f", [1, 7, 16, 37])
def test_nbytes_exact(name: str, f: int) -> None:
    codec = make_codec(name)
    x = (torch.rand(11, f) < 0.5).float()
    enc = codec.encode(x)
    tensors = [t for t in (enc.data, enc.scale, enc.zero) if t is not None]
    actual = sum(t.numel() * t.element_size() for t in tensors)
    assert codec.nbytes(enc) == actual == 11 * codec.row_nbytes(f)
    expected_row = {"fp32": 4 * f, "fp16": 2 * f, "bf16": 2 * f, "int8": f + 4}
    expected_row |= {"int4": (f + 1) // 2 + 4, "binary": (f + 7) // 8}
    assert codec.row_nbytes(f) == expected_row[name]


@pytest.mark.parametrize("name", FIXED)
def test_take_concat_put_select_rows_without_decoding(name: str) -> None:
    codec = make_codec(name)
    x = features(20, 9)
    enc = codec.encode(x)
    pos = torch.tensor([5, 0, 19, 5])
    full = codec.decode(enc)
    assert torch.equal(codec.decode(take(enc, pos)), full[pos])
    both = concat([take(enc, pos[:2]), take(enc, pos[2:])])
    assert torch.equal(codec.decode(both), full[pos])
    store = codec.empty(6, 9)
    put(store, torch.tensor([3, 1]), take(enc, torch.tensor([7, 8])))
    assert torch.equal(codec.decode(take(store, torch.tensor([3, 1]))), full[7:9])


def test_concat_rejects_mixed_codecs() -> None:
    x = features(4, 3)
    with pytest.raises(ValueError, match="one codec"):
        concat([make_codec("fp16").encode(x), make_codec("int8").encode(x)])


def test_stochastic_rounding_seeded_unbiased_and_within_one_step() -> None:
    x = features(200, 64)
    a = Int8Codec(stochastic=True, seed=3).encode(x)
    b = Int8Codec(stochastic=True, seed=3).encode(x)
    c = Int8Codec(stochastic=True, seed=4).encode(x)
    assert torch.equal(a.data, b.data) and not torch.equal(a.data, c.data)
    for codec in (Int8Codec(stochastic=True, seed=3), Int4Codec(stochastic=True, seed=3)):
        enc = codec.encode(x)
        assert enc.scale is not None
        err = codec.decode(enc) - x
        assert bool((err.abs() <= enc.scale.float()[:, None] * (1 + 1e-3)).all())
    # 0.3 lies between int4 levels of a [0, 1] row (step 1/15): the mean decodes to 0.3
    xs = torch.tensor([[0.3, 0.0, 1.0]]).repeat(4000, 1)
    codec = Int4Codec(stochastic=True, seed=0)
    got = codec.decode(codec.encode(xs))[:, 0]
    assert abs(float(got.mean()) - 0.3) < 0.005 and float(got.std()) > 0.01


def test_auto_picks_smallest_exact_codec_else_lossy() -> None:
    assert AutoCodec().resolve((torch.rand(10, 20) < 0.3).float()).name == "binary"
    assert AutoCodec().resolve(features()).name == "int8"
    assert AutoCodec(lossy="int4").resolve(features()).name == "int4"
    assert AutoCodec().resolve(features().half().float()).name == "fp16"
    bits = (torch.rand(10, 20) < 0.3).float()
    enc = AutoCodec().encode(bits)
    assert enc.codec == "binary" and torch.equal(AutoCodec().decode(enc), bits)
    with pytest.raises(ValueError, match="resolve"):
        AutoCodec().row_nbytes(3)
    with pytest.raises(ValueError, match="lossy"):
        AutoCodec(lossy="binary")


def test_registry_and_bad_input() -> None:
    assert set(CODECS) == {"fp32", "fp16", "bf16", "int8", "int4", "binary", "auto"}
    with pytest.raises(ValueError, match="unknown codec"):
        make_codec("int2")
    with pytest.raises(ValueError, match="does not take"):
        make_codec("fp16", stochastic=True)
    with pytest.raises(ValueError, match="NaN"):
        make_codec("int8").encode(torch.tensor([[float("nan")]]))
    with pytest.raises(TypeError):
        make_codec("int8").encode([[1.0]])  # type: ignore[arg-type]


def test_nibble_packing_order() -> None:
    q = torch.tensor([[1, 2, 3]], dtype=torch.int16)
    packed = pack_nibbles(q)
    assert packed.tolist() == [[0x21, 0x03]]
    assert unpack_nibbles(packed, 3).tolist() == [[1, 2, 3]]


@pytest.mark.parametrize("method", WIRE_METHODS)
@pytest.mark.parametrize("name", FIXED + ["binary"])
def test_wire_round_trip_identical(method: str, name: str) -> None:
    x = (torch.rand(64, 40) < 0.1).float() if name == "binary" else features(64, 40)
    enc = make_codec(name).encode(x)
    frame = wire_compress(enc, method)
    back = wire_decompress(frame)
    assert frame.raw_nbytes == enc.nbytes
    for a, b in ((enc.data, back.data), (enc.scale, back.scale), (enc.zero, back.zero)):
        assert (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
    if name == "binary":
        assert frame.wire_nbytes < frame.raw_nbytes


def test_wire_unknown_method() -> None:
    with pytest.raises(ValueError, match="wire method"):
        wire_compress(make_codec("fp32").encode(features(4, 2)), "brotli")


@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16", "int8", "int4", "binary"])
def test_encoded_rows_pickle_as_numpy_and_come_back_equal_and_writable(name: str) -> None:
    codec = make_codec(name)
    x = torch.randn(40, 13, generator=torch.Generator().manual_seed(0))
    enc = codec.encode((x > 0).float() if name == "binary" else x)
    # Out of band: the payload travels as a buffer (what Ray writes to its object store).
    buffers: list[pickle.PickleBuffer] = []
    wire = pickle.dumps(enc, protocol=5, buffer_callback=buffers.append)
    assert sum(memoryview(b).nbytes for b in buffers) == enc.nbytes
    back = pickle.loads(wire, buffers=buffers)
    assert back.codec == enc.codec and back.num_cols == enc.num_cols
    assert back.data.dtype == enc.data.dtype and torch.equal(back.data, enc.data)
    for a, b in ((back.scale, enc.scale), (back.zero, enc.zero)):
        assert (a is None) == (b is None)
        assert a is None or (b is not None and torch.equal(a, b))
    assert torch.equal(codec.decode(back), codec.decode(enc))
    back.data.add_(0)  # a private, writable copy: nothing aliases the sender's buffers
    assert back.data.data_ptr() != enc.data.data_ptr()


def test_all_finite_is_exact_even_when_the_sum_overflows() -> None:
    from gnnsys.cache.codecs.base import all_finite

    x = torch.ones(4, 3)
    assert all_finite(x)
    for bad in (float("nan"), float("inf"), float("-inf")):
        y = x.clone()
        y[2, 1] = bad
        assert not all_finite(y)
    big = torch.full((4, 3), 3e38)  # finite values whose float32 sum overflows
    assert all_finite(big)
    assert all_finite(torch.full((2, 2), 6e4, dtype=torch.float16))  # fp16 sum overflows

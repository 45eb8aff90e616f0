"""Per-type codec specs (``--codec paper=int8,*=fp16``): parsing, validation, resolution."""

from __future__ import annotations

import pickle
import re

import pytest
import torch

from gnnsys.cache import CODECS, CodecConfig, PerTypeCodecConfig, make_codec
from gnnsys.cache.codecs.config import is_per_type_spec, split_codec_spec

TYPES = ["paper", "author", "institution", "field_of_study"]
KNOWN = sorted(CODECS)


def names(config: PerTypeCodecConfig) -> dict[str, str]:
    return {t: config.for_type(t).name for t in config.node_types}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("int8", dict.fromkeys(TYPES, "int8")),
        ("*=int8", dict.fromkeys(TYPES, "int8")),
        ("fp32", dict.fromkeys(TYPES, "fp32")),
        ("paper=int8", {"paper": "int8", "author": "fp32", "institution": "fp32",
                        "field_of_study": "fp32"}),
        ("paper=int8,author=fp16", {"paper": "int8", "author": "fp16", "institution": "fp32",
                                    "field_of_study": "fp32"}),
        ("paper=int8,*=fp16", {"paper": "int8", "author": "fp16", "institution": "fp16",
                               "field_of_study": "fp16"}),
        ("bf16, paper = int4", {"paper": "int4", "author": "bf16", "institution": "bf16",
                                "field_of_study": "bf16"}),
        ("author=auto,*=binary", {"paper": "binary", "author": "auto", "institution": "binary",
                                  "field_of_study": "binary"}),
    ],
)  # fmt: skip
def test_parse_gives_every_type_a_codec(spec: str, expected: dict[str, str]) -> None:
    config = PerTypeCodecConfig.parse(spec, TYPES)
    assert config.node_types == TYPES  # the graph's order, whatever the spec's
    assert names(config) == expected
    assert config.spec == ",".join(f"{t}={expected[t]}" for t in TYPES)
    assert PerTypeCodecConfig.parse(config.spec, TYPES) == config  # the canonical spec round-trips


def test_parse_carries_lossy_and_wire_and_from_config_reads_the_run_setting() -> None:
    config = PerTypeCodecConfig.parse("paper=auto,*=int8", TYPES, lossy="int4", wire="zstd")
    assert all(config.for_type(t).lossy == "int4" for t in TYPES)
    assert all(config.for_type(t).wire == "zstd" for t in TYPES)
    run = CodecConfig(name="paper=auto,*=int8", lossy="int4", wire="zstd")
    assert PerTypeCodecConfig.from_config(run, TYPES) == config
    assert PerTypeCodecConfig.from_config(CodecConfig(), TYPES) == PerTypeCodecConfig.parse(
        "fp32", TYPES
    )
    assert pickle.loads(pickle.dumps(config)) == config  # travels to Ray actors


def test_codecs_makes_one_object_per_type_in_its_codec() -> None:
    codecs = PerTypeCodecConfig.parse("paper=int8,author=fp16,*=bf16", TYPES).codecs()
    assert list(codecs) == TYPES
    assert codecs["paper"] == make_codec("int8") and codecs["author"] == make_codec("fp16")
    assert codecs["institution"] == make_codec("bf16") == codecs["field_of_study"]


SPEC_ERRORS = [
    ("papr=int8", f"codec spec 'papr=int8' names node type 'papr', which this graph lacks; its "
     f"node types are {TYPES} (or use '*=NAME' for every other type)"),
    ("paper=int9", f"codec spec 'paper=int9': unknown codec 'int9' for node type 'paper'; choose "
     f"one of {KNOWN}"),
    ("zip", f"codec spec 'zip': unknown codec 'zip' for the default; choose one of {KNOWN}"),
    ("paper=int8,*=zip", f"codec spec 'paper=int8,*=zip': unknown codec 'zip' for the default; "
     f"choose one of {KNOWN}"),
    ("paper=int8,paper=fp16", "codec spec 'paper=int8,paper=fp16' names node type 'paper' twice "
     "('int8', 'fp16'); give each type once"),
    ("int8,*=fp16", "codec spec 'int8,*=fp16' gives the default twice ('int8', 'fp16'); give one "
     "bare NAME or '*=NAME'"),
    ("int8,fp16", "codec spec 'int8,fp16' gives the default twice ('int8', 'fp16'); give one "
     "bare NAME or '*=NAME'"),
    ("paper=int8,,author=fp16", "codec spec 'paper=int8,,author=fp16' has an empty entry; "
     "separate TYPE=NAME entries by single commas, e.g. 'paper=int8,*=fp16'"),
    ("paper=int8,", "codec spec 'paper=int8,' has an empty entry; separate TYPE=NAME entries by "
     "single commas, e.g. 'paper=int8,*=fp16'"),
    ("", "codec spec '' has an empty entry; separate TYPE=NAME entries by single commas, e.g. "
     "'paper=int8,*=fp16'"),
    ("paper=", "codec spec entry 'paper=' needs both a node type and a codec: TYPE=NAME (e.g. "
     "'paper=int8') or '*=NAME' for every other type"),
    ("=int8", "codec spec entry '=int8' needs both a node type and a codec: TYPE=NAME (e.g. "
     "'paper=int8') or '*=NAME' for every other type"),
    ("paper=int8=fp16", f"codec spec 'paper=int8=fp16': unknown codec 'int8=fp16' for node type "
     f"'paper'; choose one of {KNOWN}"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "message"), SPEC_ERRORS)
def test_parse_rejects_bad_specs_naming_value_and_fix(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        PerTypeCodecConfig.parse(spec, TYPES)


@pytest.mark.parametrize(("spec", "message"), [e for e in SPEC_ERRORS if "lacks" not in e[1]])
def test_codec_config_checks_spec_syntax_before_the_types_are_known(
    spec: str, message: str
) -> None:
    if not is_per_type_spec(spec):  # a bare name keeps CodecConfig's own message
        message = f"codec name={spec!r}; choose one of {KNOWN}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        CodecConfig(name=spec)


@pytest.mark.parametrize("node_types", [[], ["paper", "paper"]])
def test_parse_rejects_bad_node_type_lists(node_types: list[str]) -> None:
    message = f"node_types={node_types}; pass the graph's node types, each once"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        PerTypeCodecConfig.parse("int8", node_types)


def test_for_type_names_the_known_types() -> None:
    config = PerTypeCodecConfig.parse("int8", TYPES)
    message = f"node type 'venue' has no codec; known types: {TYPES}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        config.for_type("venue")


def test_plain_names_keep_their_meaning_and_typed_specs_stop_homogeneous_runs() -> None:
    assert not CodecConfig(name="int8").per_type and CodecConfig(name="int8").make() == make_codec(
        "int8"
    )
    assert split_codec_spec("int8") == ("int8", ())
    assert split_codec_spec(" paper=int8 , *=fp16") == ("fp16", (("paper", "int8"),))
    typed = CodecConfig(name="paper=int8,*=fp16")
    assert typed.per_type
    x = torch.randn(4, 3)
    for what, call in [
        ("make", typed.make),
        ("resolve", lambda: typed.resolve(x)),
        ("resolve_chunks", lambda: typed.resolve_chunks(lambda: [x])),
    ]:
        message = (
            "codec 'paper=int8,*=fp16' names a codec per node type, which only a heterogeneous "
            f"graph has ({what} needs one codec); pass one codec name, e.g. --codec int8"
        )
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            call()


def test_record_rejects_duplicate_empty_and_nested_entries() -> None:
    with pytest.raises(ValueError, match=re.escape("lists node types ['paper'] twice")):
        PerTypeCodecConfig((("paper", CodecConfig()), ("paper", CodecConfig())))
    with pytest.raises(ValueError, match="at least one node type"):
        PerTypeCodecConfig(())
    with pytest.raises(ValueError, match=re.escape("node types ['paper'] hold a per-type spec")):
        PerTypeCodecConfig((("paper", CodecConfig(name="paper=int8")),))


# ---- resolution against the rows ---------------------------------------------------------------
def features() -> dict[str, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=gen)
    return {
        "paper": x,
        "author": (x > 0).float(),  # 0/1 rows
        "institution": x.to(torch.bfloat16).float(),  # exactly bf16-representable
        "field_of_study": None,  # featureless: learnable embeddings
    }


def test_resolve_picks_auto_per_type_and_fp32_for_featureless_types() -> None:
    config = PerTypeCodecConfig.parse("auto", TYPES, lossy="fp16").resolve(features())
    assert names(config) == {
        "paper": "fp16",  # Gaussian: the lossy fallback
        "author": "binary",
        "institution": "bf16",
        "field_of_study": "fp32",  # nothing to check exactness on
    }
    assert config.resolve(features()) == config  # concrete names pass through
    chunked = {
        t: None if x is None else (lambda x=x: [x[:10], x[10:]]) for t, x in features().items()
    }
    assert PerTypeCodecConfig.parse("auto", TYPES, lossy="fp16").resolve_chunks(chunked) == config
    message = "codec name='auto' is unresolved; call CodecConfig.resolve(x) first"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        PerTypeCodecConfig.parse("auto", TYPES).codecs()


def test_resolve_treats_an_absent_type_as_featureless() -> None:
    x = features()
    del x["field_of_study"]
    config = PerTypeCodecConfig.parse("paper=int8,*=auto", TYPES).resolve(x)
    assert config.for_type("field_of_study").name == "fp32"


RESOLVE_ERRORS = [
    ("paper=binary", "codec spec 'paper=binary,author=fp32,institution=fp32,field_of_study=fp32' "
     "gives binary to node type 'paper', whose features are not all 0/1; give it auto or a lossy "
     "codec, e.g. paper=int8"),
    ("author=binary,field_of_study=binary", "codec spec 'paper=fp32,author=binary,"
     "institution=fp32,field_of_study=binary' gives binary to node type 'field_of_study', which "
     "has no features (its rows are learnable embeddings); give it another codec, e.g. "
     "field_of_study=fp32"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "message"), RESOLVE_ERRORS)
def test_resolve_rejects_codecs_a_type_cannot_use(spec: str, message: str) -> None:
    config = PerTypeCodecConfig.parse(spec, TYPES)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        config.resolve(features())


def test_resolve_rejects_fp16_on_rows_it_cannot_hold() -> None:
    x = features()
    x["paper"] = torch.tensor([[1.0, -70000.0]])
    message = (
        "codec spec 'paper=fp16,author=fp32,institution=fp32,field_of_study=fp32' gives fp16 to "
        "node type 'paper', whose features reach |x| = 7e+04 > 6.55e+04; give it bf16 or fp32, "
        "e.g. paper=bf16"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        PerTypeCodecConfig.parse("paper=fp16", TYPES).resolve(x)
    x["paper"] = torch.tensor([[1.0, -65504.0]])  # the largest finite fp16 is fine
    assert PerTypeCodecConfig.parse("paper=fp16", TYPES).resolve(x).for_type("paper").name == "fp16"


def test_resolve_rejects_features_of_unknown_types() -> None:
    message = f"features given for node types ['venue']; known: {TYPES}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        PerTypeCodecConfig.parse("int8", TYPES).resolve({"venue": torch.zeros(1, 1)})

"""``--precision`` specs: every documented form, and errors that name the problem."""

import pytest

from diptych.arch import load_chip
from diptych.tools.precision_spec import PHASES, PrecisionChoice, parse_precision, resolve
from diptych.sim.run.node import default_precision

ALL = PrecisionChoice("bf16", "bf16", "bf16")


def test_forms():
    assert parse_precision("bf16") == dict.fromkeys(PHASES, ALL)
    fp8 = PrecisionChoice("fp8", "fp8", "fp8")
    assert parse_precision("w=fp8,a=fp8,kv=fp8") == dict.fromkeys(PHASES, fp8)
    assert parse_precision("weights=int4") == dict.fromkeys(PHASES, PrecisionChoice("int4"))
    assert parse_precision(["train:bf16", "infer:w=fp8, act=fp8"]) == {
        "train": ALL, "prefill": PrecisionChoice("fp8", "fp8"),
        "decode": PrecisionChoice("fp8", "fp8")}
    assert parse_precision([]) == {}


@pytest.mark.parametrize("spec, message", [
    ("fp9", "'fp9' is not a dtype"),
    ("w=bf16,w=fp8", "weights is given twice"),
    ("x=bf16", "unknown tensor 'x'"),
    ("acc=fp32", "accumulation is fp32 in every run"),
    ("serve:bf16", "unknown phase 'serve'"),
    ("w", "'w' is not a dtype"),
    ("w=bf16,fp8", "'fp8' is not TENSOR=DTYPE"),
    ("", "empty"),
])
def test_errors_name_the_problem(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_precision(spec)


def test_a_phase_pinned_twice_is_an_error():
    with pytest.raises(ValueError, match="the train precision is already pinned"):
        parse_precision(["bf16", "train:fp8"])


@pytest.mark.parametrize("chip", ["infer-2026", "train-2026", "tpu-v4"])
@pytest.mark.parametrize("phase", PHASES)
def test_resolve_is_what_run_workload_defaults_to(chip, phase):
    c = load_chip(chip)
    p = default_precision(c, phase)
    r = resolve(c, phase)
    assert (r["weights"], r["activations"], r["kv"], r["accumulation"]) == (
        p.weights, p.activations, p.kv, p.accumulation)
    assert r["unsupported"] is None


def test_resolve_reports_what_a_chip_cannot_compute():
    v1 = load_chip("tpu-v1")            # int8 only
    assert "no bf16 or fp16" not in (resolve(v1, "decode")["unsupported"] or "")
    assert resolve(v1, "decode", ALL)["unsupported"] == (
        "tpu-v1 has no bf16 datapath; its arrays support int8")
    assert "supports neither bf16 nor fp16" in resolve(v1, "train")["unsupported"]
    # a KV cache wider than the arrays compute: attention needs that width too
    kv = resolve(v1, "decode", PrecisionChoice(kv="bf16"))
    assert kv["compute"] == "int8" and "bf16" in kv["unsupported"]

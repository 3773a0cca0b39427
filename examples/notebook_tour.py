"""A tour of the Python API, as a notebook would use it (run: python examples/notebook_tour.py).

Each step prints what it found; the numbers are the same as the `diptych` commands print.
The test suite runs this script (tests/test_examples.py), so it stays small and fast:
llama-3-8b, short contexts. Change the names and sizes to ask your own questions.
"""

import sys
import tempfile

import diptych
from diptych.arch.area import die_area_mm2

print(f"diptych {diptych.__version__}")

# 1. A chip: a preset, your own TOML file (`diptych chips template ...`) or a Chip object.
chip = diptych.load_chip("infer-2026")
print(f"{chip.name}: {chip.peak_ops_per_s['fp8'] / 1e15:.2f} PFLOP/s fp8, "
      f"{chip.dram_bytes_per_s / 1e12:.1f} TB/s HBM, {die_area_mm2(chip):.0f} mm²")

# 2. A model: built-in or a HuggingFace config.json path.
model = diptych.load_model("llama-3-8b")
print(f"{model.name}: {model.layers} layers, hidden {model.hidden_size}, "
      f"window {model.max_position_embeddings} tokens")

# 3. One GEMM on the chip's arrays (cycles, stalls, bytes, energy): `diptych gemm`.
st = diptych.simulate_gemm(4096, 4096, 4096, chip)
print(f"GEMM 4096³: {st.seconds * 1e6:.1f} µs, {st.utilization:.1%} of peak, {st.bound}-bound, "
      f"{st.mapping['active_arrays']} arrays ({st.mapping['dataflow']})")

# 4. One phase of the model: `diptych run --json` is r.to_dict().
for precision in (None, "bf16"):
    r = diptych.run(chip, model, phase="decode", batch=8, prompt=1024, precision=precision)
    p = r.precision
    print(f"decode batch 8 at 1k context, W {p['weights']} / KV {p['kv']}: "
          f"{r.tpot_s * 1e3:.2f} ms per token, {r.tokens_per_s:.0f} tokens/s, {r.bound}-bound")

# 5. The headline comparison on a small grid: `diptych compare --json` is cmp.to_json().
cmp = diptych.compare(["train-2026", "infer-2026"], model, prompts=[512], contexts=[1024],
                      batches=[1, 8], ref_batch=8, train_seq=1024)
for name, s in cmp.to_json()["chips"].items():
    print(f"{name}: train {s['train']['tokens_per_s']:.0f} tokens/s per chip "
          f"(MFU {s['train']['mfu']:.0%} of its {s['train']['mfu_peak_dtype']} peak), "
          f"TTFT {s['prefill'][0]['ttft_s'] * 1e3:.1f} ms, decode precision "
          f"{s['precision']['decode']['weights']}")
for w in cmp.warnings():
    print("warning:", w)

# 6. The HTML report (index.html, plots, CSV) into a folder you choose.
out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="diptych-tour-")
files = diptych.write_report(cmp, out)
print(f"report: {len(files)} files in {out} (open {out}/index.html)")

# 7. Serving the model under load: `diptych serve --json` is res.to_dict().
res = diptych.serve(chip, model, qps=2.0, requests=8, prompt="256", gen="16")
print(f"serving at 2 req/s: TTFT {res.ttft_s['mean'] * 1e3:.1f} ms, "
      f"TPOT {res.tpot_s['mean'] * 1e3:.2f} ms, {res.tokens_per_s:.0f} output tokens/s")

# 8. Its floorplan, to scale (`diptych floorplan`), next to the report.
fig, plans = diptych.floorplan([chip], f"{out}/tour-floorplan.svg")
print(f"floorplan: {out}/tour-floorplan.svg")

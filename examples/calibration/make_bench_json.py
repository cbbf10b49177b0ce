"""Write GPUStack's four published `vllm bench serve` runs of gpt-oss-120b on two H100s (vLLM
0.10.2, `--async-scheduling`) in the layout `vllm bench serve --save-result` writes, for
docs/calibration.md's walk from a user's bench JSONs to a calibrated what-if:

    python examples/calibration/make_bench_json.py

The figures are the page's (gpustack/gpustack@47277d7, docs/performance-lab/gpt-oss-120b/h100.md,
"Other Benchmark Cases", Apache-2.0), as validation/gpustack_perf_lab.yaml copied them; the
page gives each run's totals, not per-request lengths, so every request gets the run's mean
prompt and output length (what the case file replays too). request_rate inf: every request sent
at once, as the page ran them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CASES = HERE.parents[1] / "validation" / "gpustack_perf_lab.yaml"
PREFIX = "gpustack-gpt-oss-120b-h100-vllm0.10.2-gpt-oss-120b-tp2-async-"


def main() -> None:
    cases = yaml.safe_load(CASES.read_text())["cases"]
    for case in cases:
        if not case["id"].startswith(PREFIX):
            continue
        burst = case["workload"]["burst"]
        n = burst["num_requests"]
        result = {
            "backend": "openai-chat",
            "model_id": "openai/gpt-oss-120b",
            "num_prompts": n,
            "request_rate": "inf",
            "burstiness": 1.0,
            "max_concurrency": None,
            "input_lens": [burst["input_len"]] * n,
            "output_lens": [burst["output_len"]] * n,
            **case["measured"],
            "source": case["source"],
        }
        out = HERE / f"{case['id'].removeprefix(PREFIX)}.json"
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out.relative_to(HERE.parents[1])}")


if __name__ == "__main__":
    main()

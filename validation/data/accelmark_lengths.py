"""Writes accelmark_suite_c_online.csv: the prompt lengths AccelMark's suite_C online scenario
sent, one row per request in the order the runner sends them.

Source: https://github.com/FreedomIntelligence/AccelMark at commit
5797fc42745be2494e6213938d9e5afa0c6c5bef (Apache-2.0; prompts CC BY 4.0 from
shibing624/sharegpt_gpt4). loadgen/loadgen.py takes the first online_request_count (300,
suites/suite_C/suite.json) requests of datasets/sharegpt_standard_v1/requests.jsonl and, before
them, fires online_warmup_requests (10) warm-up requests, requests[i % 300] for i < 10: the
first ten. Each row's prompt is the file's input_tokens plus CHAT_TEMPLATE_TOKENS: the runner
sends tokenizer.apply_chat_template([{"role": "user", ...}], add_generation_prompt=True)
(runners/benchmark_runner.py format_prompt), which for Llama-3.1-Instruct wraps the prompt in
the system block "Cutting Knowledge Date: December 2023 / Today Date: 26 Jul 2024" and the
user and assistant headers (the template's text as quoted in ShishirPatil/gorilla PR #752), and
vLLM 0.7.3 tokenises that string with add_special_tokens on, adding a second <|begin_of_text|>.

Outputs are not recorded per request. Their mean is: the suite's offline runs of the first 100
requests (greedy, max_tokens 512, the same checkpoints) produce 35,400-36,400 output tokens on
every host (throughput_tokens_per_sec x elapsed_seconds_median of results/verified/*suite_C*
vllm_47f5d58e*/bf16/offline/result.json): 357 a request. Per request they are drawn from a
lognormal of sigma 0.5 (as the case file had) scaled so the mean after the 512-token cap is 357,
seeded, so the file is the same on every run.

Run: python validation/data/accelmark_lengths.py ACCELMARK_CHECKOUT"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

COMMIT = "5797fc42745be2494e6213938d9e5afa0c6c5bef"
DATASET = "datasets/sharegpt_standard_v1/requests.jsonl"
ONLINE_REQUESTS = 300  # suites/suite_C/suite.json online_request_count
WARMUP = 10  # loadgen.py online_warmup_requests default
# ESTIMATE, counted by hand under Llama 3's pre-tokeniser (digits in groups of three, a space
# before a number its own token): <|begin_of_text|> 1; system header, "\n\n" 4; "Cutting Knowledge
# Date: December 2023\n" 10; "Today Date: 26 Jul 2024\n\n" 10; <|eot_id|> 1; user header 4; the
# prompt's <|eot_id|> 1; assistant header 4; vLLM's second <|begin_of_text|> 1: 36, less one if
# the dataset's input_tokens already count a BOS
CHAT_TEMPLATE_TOKENS = 35
MEAN_OUTPUT = 357  # offline runs: ~35,700 output tokens for the first 100 requests
MAX_TOKENS = 512  # suite_C output_tokens_max
SIGMA = 0.5
OUT = Path(__file__).with_name("accelmark_suite_c_online.csv")


def outputs(n: int) -> np.ndarray:
    """n seeded lognormal draws of sigma SIGMA, capped at MAX_TOKENS, mean MEAN_OUTPUT."""
    z = np.random.default_rng(0).standard_normal(n)
    lo, hi = 1.0, float(MAX_TOKENS)
    for _ in range(60):  # bisect the median whose capped draws average MEAN_OUTPUT
        mid = (lo + hi) / 2
        mean = np.minimum(np.rint(mid * np.exp(SIGMA * z)), MAX_TOKENS).mean()
        lo, hi = (mid, hi) if mean < MEAN_OUTPUT else (lo, mid)
    return np.clip(np.rint(lo * np.exp(SIGMA * z)), 1, MAX_TOKENS).astype(np.int64)


def main(checkout: str) -> None:
    text = subprocess.run(
        ["git", "-C", checkout, "show", f"{COMMIT}:{DATASET}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = [json.loads(line) for line in text.split("\n") if line.strip()]
    sent = rows[:WARMUP] + rows[:ONLINE_REQUESTS]
    prompt = np.array([r["input_tokens"] for r in sent]) + CHAT_TEMPLATE_TOKENS
    out = outputs(len(sent))
    lines = ["num_prefill_tokens,num_decode_tokens"]
    lines += [f"{p},{o}" for p, o in zip(prompt, out, strict=True)]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {len(sent)} rows, prompt mean {prompt.mean():.0f}, output mean {out.mean():.0f}")


if __name__ == "__main__":
    main(sys.argv[1])

"""Engine releases as data: each version's defaults plus the rules that derive settings from the
GPU and the model, resolved into one EngineSettings whose every field carries its category of
cause and the rule that set it.

    settings.py      EngineSettings, Category: what every simulation reads
    resolve.py       resolve(): engine@version x GPU x model x engine_args -> EngineSettings
    vllm.py, sglang.py, trtllm.py, teaching.py   one family's releases and rules each
    v1_oracle.py     whether vLLM 0.8-0.10 runs V1 or falls back to V0, and V0's refusals
    published.py     the releases each engine has published: which ones the catalogue knows
    speculative.py, features.py   vLLM V1 features (speculative decoding, KV offload and
                     transfer) as knobs with defaults and start-up checks
    overheads.py     engine CPU time per step by release (calibration/engine_overheads.yaml)
    windows.py       how a release's allocator sizes windowed layers: every token or the window
    mxfp4.py         the kernel vLLM runs MXFP4 experts with, by release and GPU, and its padding
    versions.py      version strings as comparable tuples, and in full release order

May import sim.specs (and the root's config, errors, paths).
"""

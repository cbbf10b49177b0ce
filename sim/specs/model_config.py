"""Reading HuggingFace `config.json` files into a ModelSpec.

`model=llama-3.1-8b` picks sim/catalog/models/llama-3.1-8b.json; `model=path/to/config.json` reads
any file. The field names are HuggingFace's, across the families the catalogue covers (Llama,
Mistral/Mixtral, Qwen2/3/3-MoE/3-Next, Gemma 3, gpt-oss, Llama 4, DeepSeek V3/V3.2, Kimi-Linear,
MiniMax-Text-01).
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import UserError
from sim.paths import MODEL_CATALOG_DIR, shared_data_missing
from sim.specs.model import Attention, Layer, LinearAttention, Mla, ModelSpec, Moe, SparseIndexer
from sim.specs.names import catalogue_match, did_you_mean, name_words
from sim.user_files import load_json, require_file


def model_names(root: Path = MODEL_CATALOG_DIR) -> list[str]:
    return sorted(p.stem for p in root.glob("*.json"))


def load_model(name_or_path: str, root: Path = MODEL_CATALOG_DIR) -> ModelSpec:
    path = Path(name_or_path)
    if path.suffix != ".json":
        path = root / f"{catalogue_name(name_or_path, root)}.json"
    else:
        require_file(path, f"model file {path}", shared_data_missing(path))
    raw = load_json(path, "model config", kind="a valid JSON config")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a JSON object of HuggingFace config fields")
    name = path.stem if path.parent == root else str(path)
    return spec_from_config(raw, name=name, source=str(path))


def catalogue_name(name: str, root: Path = MODEL_CATALOG_DIR) -> str:
    """The catalogue entry `model=name` selects: the entry of that name, else the one a
    HuggingFace id names (`meta-llama/Llama-3.1-8B-Instruct` -> `llama-3.1-8b`, sim/specs/
    names.py); an error with the closest names when neither is there."""
    if _is_file(root / f"{name}.json"):
        return name
    names = model_names(root)
    entry = catalogue_match(name, names)
    if entry is not None:
        return entry
    typed = "-".join(name_words(name)) if "/" in name else name
    hf = (
        "a HuggingFace id is taken when it names an entry up to -Instruct, -chat, -Base or -hf "
        "(else give the path of its config.json); "
        if "/" in name
        else ""
    )
    raise UserError(
        f"model={name!r} is not in the catalogue{did_you_mean(typed, names)}; {hf}choose one "
        f"of: {', '.join(names)} (or a path to a HuggingFace config.json)"
    )


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system
        return False


# Sizes beyond these are typos, not models: the layers are built one by one, and the cost model
# multiplies sizes together.
MAX_SIZE = 2**31
MAX_LAYERS = 10_000


class _Fields:
    """Typed access to a config dict, with errors that name the file and the field."""

    def __init__(self, raw: dict, source: str, prefix: str = ""):
        text = raw.get("text_config")
        self.cfg = {**raw, **text} if isinstance(text, dict) else dict(raw)
        self.source = source
        self.prefix = prefix  # where a nested dict sits, e.g. "linear_attn_config."

    def get(self, key: str, default=None):
        value = self.cfg.get(key)
        return default if value is None else value

    def _bad(self, key: str, value, want: str) -> UserError:
        text = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return UserError(f"{self.source}: field {self.prefix + key!r} must be {want}, got {text}")

    def int(self, key: str, default: int | None = None, limit: int = MAX_SIZE) -> int:
        value = self.get(key, default)
        if value is None:
            raise UserError(f"{self.source}: missing field {self.prefix + key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self._bad(key, value, "a positive integer")
        if value > limit:
            raise self._bad(key, value, f"at most {limit} (no model is that large)")
        return value

    def count(self, key: str, default: int = 0) -> int:
        """An integer >= 0: a layer index or a number of layers."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SIZE:
            raise self._bad(key, value, "an integer >= 0")
        return value

    def ints(self, key: str, lowest: int = 0) -> list[int]:
        values = self.get(key, [])
        if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and lowest <= v <= MAX_SIZE
            for v in values
        ):
            raise self._bad(key, values, f"a list of integers >= {lowest}")
        return values

    def dict(self, key: str) -> dict:
        value = self.get(key, {})
        if not isinstance(value, dict):
            raise self._bad(key, value, "a mapping")
        return value


def spec_from_config(raw: dict, name: str, source: str = "<config>") -> ModelSpec:
    f = _Fields(raw, source)
    model_type = str(f.get("model_type", ""))
    hidden = f.int("hidden_size")
    num_layers = f.int("num_hidden_layers", limit=MAX_LAYERS)
    num_q_heads = f.int("num_attention_heads")
    if f.get("head_dim") is None and hidden < num_q_heads:
        raise UserError(
            f"{source}: hidden_size {hidden} is smaller than num_attention_heads {num_q_heads}; "
            "give head_dim"
        )
    head_dim = f.int("head_dim", hidden // num_q_heads)
    mla = _mla(f)
    moe = _moe(f)
    linear = _linear(f, num_q_heads, head_dim)
    attention = _attention_kinds(f, num_layers, model_type, mla is not None)
    if Attention.LINEAR in attention and linear is None:
        raise UserError(f"{source}: linear-attention layers but no linear-attention dimensions")
    moe_layers = _moe_layers(f, num_layers) if moe else [False] * num_layers
    layers = tuple(
        Layer(attention=kind, window_tokens=window, moe=is_moe)
        for (kind, window), is_moe in zip(attention, moe_layers, strict=True)
    )
    dense_width = f.int("intermediate_size_mlp", f.int("intermediate_size"))
    indexer = None
    if "index_head_dim" in f.cfg:
        indexer = SparseIndexer(
            f.int("index_n_heads"), f.int("index_head_dim"), f.int("index_topk")
        )
    checkpoint_dtype, experts_only = _checkpoint_dtype(f)
    return ModelSpec(
        name=name,
        architecture=_architecture(f, model_type),
        hidden_size=hidden,
        vocab_size=f.int("vocab_size"),
        num_q_heads=num_q_heads,
        num_kv_heads=f.int("num_key_value_heads", num_q_heads),
        head_dim=head_dim,
        intermediate_size=dense_width,
        tie_word_embeddings=bool(f.get("tie_word_embeddings", model_type.startswith("gemma"))),
        max_position_embeddings=f.int("max_position_embeddings"),
        checkpoint_dtype=checkpoint_dtype,
        quantized_experts_only=experts_only,
        qkv_bias=bool(f.get("attention_bias", False)) or model_type == "qwen2",
        gated_attention_output=model_type == "qwen3_next",
        layers=layers,
        mla=mla,
        moe=moe,
        linear=linear,
        indexer=indexer,
        mtp_layers=f.int("num_nextn_predict_layers") if f.get("num_nextn_predict_layers") else 0,
    )


def _architecture(f: _Fields, model_type: str) -> str:
    names = f.get("architectures")
    return str(names[0]) if isinstance(names, list) and names else model_type or "unknown"


def _checkpoint_dtype(f: _Fields) -> tuple[str, bool]:
    quant = f.dict("quantization_config")
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":  # block-scaled (DeepSeek, Qwen) or per-tensor (ModelOpt-style)
        block = quant.get("weight_block_size")
        return ("fp8_block" if block else "fp8"), False
    if method == "mxfp4":
        return "fp4", True
    if method in ("awq", "gptq"):
        return "int4", False
    return ("fp16" if f.get("torch_dtype") == "float16" else "bf16"), False


def _mla(f: _Fields) -> Mla | None:
    if "kv_lora_rank" not in f.cfg:
        return None
    q_lora = f.get("q_lora_rank")
    return Mla(
        q_lora_rank=None if q_lora is None else f.int("q_lora_rank"),
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
    )


def _first_key(f: _Fields, *keys: str) -> str | None:
    return next((k for k in keys if f.get(k) is not None), None)


def _moe(f: _Fields) -> Moe | None:
    experts_key = _first_key(f, "n_routed_experts", "num_local_experts", "num_experts")
    if experts_key is None:
        return None
    topk_key = _first_key(f, "num_experts_per_tok", "experts_per_token", "num_experts_per_token")
    if topk_key is None:
        raise UserError(f"{f.source}: MoE model without num_experts_per_tok")
    expert_width = f.int("moe_intermediate_size", f.get("intermediate_size"))
    if "shared_expert_intermediate_size" in f.cfg:
        shared = f.int("shared_expert_intermediate_size")
    elif _first_key(f, "n_shared_experts", "num_shared_experts"):
        shared = expert_width * f.int(_first_key(f, "n_shared_experts", "num_shared_experts"))
    elif str(f.get("model_type", "")).startswith("llama4"):
        shared = f.int("intermediate_size")  # Llama 4: one shared expert beside the routed ones
    else:
        shared = 0
    return Moe(f.int(experts_key), f.int(topk_key), expert_width, shared)


def _moe_layers(f: _Fields, num_layers: int) -> list[bool]:
    first_dense = f.count("first_k_dense_replace")
    sparse_step = f.int("decoder_sparse_step", f.int("interleave_moe_layer_step", 1))
    freq = f.int("moe_layer_freq", 1)
    dense_only = set(f.ints("mlp_only_layers"))
    return [
        i >= first_dense
        and i not in dense_only
        and (i + 1) % sparse_step == 0
        and (i - first_dense) % freq == 0
        for i in range(num_layers)
    ]


def _linear(f: _Fields, num_q_heads: int, head_dim: int) -> LinearAttention | None:
    if "linear_num_value_heads" in f.cfg:  # Qwen3-Next: Gated DeltaNet
        return LinearAttention(
            "gated_deltanet",
            f.int("linear_num_key_heads"),
            f.int("linear_num_value_heads"),
            f.int("linear_key_head_dim"),
            f.int("linear_value_head_dim"),
            f.int("linear_conv_kernel_dim"),
        )
    lac = f.get("linear_attn_config")
    if isinstance(lac, dict):  # Kimi-Linear: Kimi Delta Attention
        sub = _Fields(lac, f.source, "linear_attn_config.")
        heads, dim = sub.int("num_heads"), sub.int("head_dim")
        return LinearAttention("kda", heads, heads, dim, dim, sub.count("short_conv_kernel_size"))
    if "attn_type_list" in f.cfg:  # MiniMax-Text-01: lightning attention, a d x d state per head
        return LinearAttention("lightning", num_q_heads, num_q_heads, head_dim, head_dim, 0)
    return None


def _attention_kinds(
    f: _Fields, num_layers: int, model_type: str, is_mla: bool
) -> list[tuple[Attention, int | None]]:
    full = (Attention.MLA, None) if is_mla else (Attention.FULL, None)
    window = f.get("sliding_window")
    if "layer_types" in f.cfg:
        names = f.get("layer_types")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise f._bad("layer_types", names, "a list of layer type names")
        if len(names) != num_layers:
            raise UserError(
                f"{f.source}: layer_types has {len(names)} entries for {num_layers} layers"
            )
        kinds = {
            "full_attention": lambda: full,
            "sliding_attention": lambda: (Attention.SLIDING, f.int("sliding_window")),
            "chunked_attention": lambda: (Attention.CHUNKED, f.int("attention_chunk_size")),
            "linear_attention": lambda: (Attention.LINEAR, None),
        }
        unknown = sorted(set(names) - set(kinds))
        if unknown:
            raise UserError(f"{f.source}: unknown layer_types {unknown}; known: {sorted(kinds)}")
        kind_of = {n: kinds[n]() for n in set(names)}
        return [kind_of[n] for n in names]
    lac = f.get("linear_attn_config")
    if isinstance(lac, dict):  # 1-based indices in the HF file
        full_layers = {
            i - 1
            for i in _Fields(lac, f.source, "linear_attn_config.").ints(
                "full_attn_layers", lowest=1
            )
        }
        return [full if i in full_layers else (Attention.LINEAR, None) for i in range(num_layers)]
    if "attn_type_list" in f.cfg:
        types = f.ints("attn_type_list")
        if len(types) < num_layers:
            raise UserError(
                f"{f.source}: attn_type_list has {len(types)} entries for {num_layers} layers"
            )
        return [full if t == 1 else (Attention.LINEAR, None) for t in types[:num_layers]]
    if "full_attention_interval" in f.cfg:
        n = f.int("full_attention_interval")
        return [full if (i + 1) % n == 0 else (Attention.LINEAR, None) for i in range(num_layers)]
    if f.get("attention_chunk_size"):
        chunk = f.int("attention_chunk_size")
        return [full if (i + 1) % 4 == 0 else (Attention.CHUNKED, chunk) for i in range(num_layers)]
    if f.get("sliding_window_pattern") and window:
        p, window = f.int("sliding_window_pattern"), f.int("sliding_window")
        return [
            full if (i + 1) % p == 0 else (Attention.SLIDING, window) for i in range(num_layers)
        ]
    if window and model_type in ("mistral", "mixtral"):
        return [(Attention.SLIDING, f.int("sliding_window"))] * num_layers
    if window and f.get("use_sliding_window", False):
        first, window = f.count("max_window_layers"), f.int("sliding_window")
        return [(Attention.SLIDING, window) if i >= first else full for i in range(num_layers)]
    return [full] * num_layers

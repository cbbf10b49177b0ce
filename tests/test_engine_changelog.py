"""tools/engine_changelog: the AST facts and the diff on small synthetic sources written here
(not engine code), the CLI's one-line errors, and the committed changelogs (sim/engines/
changelogs/*.yaml) against sim/engines/published.py. Offline: no pip download."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sim.engines.published import PUBLISHED
from sim.engines.versions import release_key
from sim.errors import UserError
from tools.engine_changelog import changes, coverage
from tools.engine_changelog.__main__ import OUT, main
from tools.engine_changelog.engines import SPECS, modelled_names
from tools.engine_changelog.extract import file_facts
from tools.engine_changelog.release import archive_facts, release_facts

SERVER_ARGS = """
import os
from dataclasses import dataclass, field

@dataclass
class ServerArgs:
    chunked_prefill_size: int | None = None
    max_running_requests: int = {max_running}
    schedule_policy: str = "fcfs"
    cuda_graph_bs: list = field(default_factory=list)
    page_size: int = field(default=1)
    {extra}

    def __post_init__(self):
        gpu_mem = get_gpu_memory()
        if self.chunked_prefill_size is None:
            if gpu_mem < 25000:
                self.chunked_prefill_size = {small_chunk}
            else:
                self.chunked_prefill_size = 8192
        chunked_prefill_size = self.chunked_prefill_size  # a pass-through, not a rule

def use_jit():
    return get_bool_env_var("SGL_ENABLE_JIT_DEEPGEMM", default="{jit}")
"""


def _source(small_chunk=2048, max_running=4096, jit="false", extra=""):
    return SERVER_ARGS.format(
        small_chunk=small_chunk, max_running=max_running, jit=jit, extra=extra
    )


def _wheel(tmp_path: Path, release: str, source: str) -> Path:
    path = tmp_path / f"sglang-{release}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("sglang/srt/server_args.py", source)
        zf.writestr("sglang/srt/models/llama.py", "x = 1\n")  # not a file the spec reads
    return path


def test_defaults_of_dataclass_pydantic_and_init_fields():
    src = """
DEFAULT_MAX_NUM_SEQS = 128
class KvCacheConfig(BaseModel):
    free_gpu_memory_fraction: float = Field(default=0.9, description="share")
    tokens_per_block: int = Field(32)
    host_cache_size: int = Field(description="no default")
class SchedulerConfig:
    def __init__(self, max_num_seqs, max_model_len, max_num_batched_tokens=None, *, policy="fcfs"):
        self.max_num_seqs = max_num_seqs
        self.delay_factor = 0.0
    max_num_partial_prefills: int = DEFAULT_MAX_NUM_SEQS
class EngineArgs:
    max_num_seqs: int = get_field(SchedulerConfig, "max_num_seqs")
class Unread:
    block_size: int = 99
"""
    found = file_facts(src, frozenset({"KvCacheConfig", "SchedulerConfig", "EngineArgs"}))
    assert found["defaults"] == {
        "KvCacheConfig.free_gpu_memory_fraction": "0.9",
        "KvCacheConfig.tokens_per_block": "32",
        "KvCacheConfig.host_cache_size": "required",
        "SchedulerConfig.max_num_batched_tokens": "None",
        "SchedulerConfig.policy": "'fcfs'",
        "SchedulerConfig.delay_factor": "0.0",
        "SchedulerConfig.max_num_partial_prefills": "128",
        "EngineArgs.max_num_seqs": "SchedulerConfig.max_num_seqs",
    }


def test_environment_flags_and_their_defaults():
    src = """
import os
A = os.getenv("VLLM_USE_V1", "1")
B = os.environ.get("VLLM_ATTENTION_BACKEND")
C = get_bool_env_var("SGL_ENABLE_JIT_DEEPGEMM", default="true")
D = os.getenv("HOME", "/root")
class Envs:
    SGLANG_ENABLE_TORCH_COMPILE = EnvBool(False)
"""
    assert file_facts(src)["env"] == {
        "VLLM_USE_V1": "'1'",
        "VLLM_ATTENTION_BACKEND": "None",
        "SGL_ENABLE_JIT_DEEPGEMM": "'true'",
        "SGLANG_ENABLE_TORCH_COMPILE": "False",
    }


def test_rules_carry_their_conditions_and_skip_fields_and_pass_throughs():
    found = file_facts(_source(), frozenset({"ServerArgs"}), frozenset({"chunked_prefill_size"}))
    rules = found["rules"]["chunked_prefill_size"]
    base = "ServerArgs.__post_init__ | self.chunked_prefill_size is None"
    assert rules == {f"{base} | gpu_mem < 25000": "2048", f"{base} | not (gpu_mem < 25000)": "8192"}


def test_selector_returns_are_rules_of_the_kernel():
    src = """
def which_backend(cc):
    if cc >= 9:
        return "FLASH_ATTN"
    return "XFORMERS"
"""
    found = file_facts(src, returns=((r"which_backend$", "attention_backend"),))
    assert found["rules"]["attention_backend"] == {
        "which_backend | cc >= 9": "'FLASH_ATTN'",
        "which_backend": "'XFORMERS'",
    }


def _facts(tmp_path, release, **kw):
    return archive_facts(SPECS["sglang"], release, _wheel(tmp_path, release, _source(**kw)))


def test_diff_names_changed_defaults_rules_flags_and_arguments(tmp_path):
    before = _facts(tmp_path, "0.4.3")
    after = _facts(tmp_path, "0.4.5", small_chunk=1024, max_running=2048, jit="true",
                   extra="enable_mixed_chunk: bool = False")  # fmt: skip
    assert before["read_from"] == ["sglang/srt/server_args.py"]
    modelled = modelled_names("sglang")
    found = changes.diff(before, after, modelled, {"max_num_seqs": "max_running_requests"})
    by = {(c["setting"], c["kind"]): c for c in found}
    rule = by["chunked_prefill_size", "derived"]
    assert (rule["before"], rule["after"], rule["modelled"]) == (2048, 1024, True)
    assert rule["where"].endswith("| gpu_mem < 25000")
    assert rule["file"] == "sglang/srt/server_args.py"
    limit = by["max_running_requests", "default"]  # max_num_seqs' category: defaults
    assert (limit["before"], limit["after"], limit["modelled"]) == (4096, 2048, True)
    added = by["enable_mixed_chunk", "added"]
    assert (added["before"], added["after"]) == (changes.ABSENT, False)
    jit = by["SGL_ENABLE_JIT_DEEPGEMM", "kernel"]
    assert (jit["before"], jit["after"]) == ("false", "true")
    assert len(found) == 4
    assert all(c["source"].startswith("sglang-0.4.5-") for c in found)
    assert changes.diff(before, before, modelled, {}) == []


def test_rules_taken_only_off_the_catalogue_platforms_are_not_modelled():
    def rule(where):
        return {"kind": "derived", "where": where}

    assert changes.off_platform(rule("f | is_cpu()"))
    assert changes.off_platform(rule("f | self.device == 'hpu' | tp > 1"))
    assert not changes.off_platform(rule("f | not (is_cpu()) | gpu_mem < 25000"))
    assert not changes.off_platform(rule("f | cpu_offload_gb > 0"))
    assert not changes.off_platform({"kind": "default", "where": "ServerArgs"})


def test_facts_are_cached_and_a_rerun_reads_no_package(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "0.4.3", _source())
    cache = tmp_path / "cache"
    first = release_facts(SPECS["sglang"], "0.4.3", cache, wheels)
    (wheels / "sglang-0.4.3-py3-none-any.whl").unlink()
    assert release_facts(SPECS["sglang"], "0.4.3", cache, wheels) == first
    assert (cache / "sglang" / "0.4.3.json").exists()


def test_cli_reruns_one_release_and_prints_what_changed(tmp_path, capsys):
    wheels, out = tmp_path / "wheels", tmp_path / "out"
    wheels.mkdir()
    _wheel(wheels, "0.4.4.post4", _source())
    _wheel(wheels, "0.4.5", _source(small_chunk=1024))
    args = ["--engine", "sglang", "--out", str(out), "--cache", str(tmp_path / "c")]
    assert main([*args, "--wheels", str(wheels), "--releases", "0.4.5"]) == 0
    printed = capsys.readouterr().out
    assert "sglang 0.4.5 (vs 0.4.4.post4): 1 changes, 1 modelled" in printed
    assert "chunked_prefill_size" in printed and "2048 -> 1024" in printed
    log = changes.read_changelog(out / "sglang.yaml")
    assert log["releases"]["0.4.5"]["modelled_change"] is True


def test_between_diffs_two_releases_across_the_ones_between(tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "0.4.3", _source())
    _wheel(wheels, "0.4.5", _source(small_chunk=1024, jit="true"))
    args = ["--engine", "sglang", "--between", "0.4.3", "0.4.5", "--out", str(tmp_path / "o")]
    assert main([*args, "--cache", str(tmp_path / "c"), "--wheels", str(wheels)]) == 0
    printed = capsys.readouterr().out
    assert "sglang 0.4.5 (vs 0.4.3): 2 changes" in printed
    assert "SGL_ENABLE_JIT_DEEPGEMM [environment]: 'false' -> 'true'" in printed
    assert not (tmp_path / "o").exists()  # --between writes nothing


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--engine", "sglang", "--releases", "0.4.55"], "not a published release"),
        (["--engine", "sglang", "--releases", "0.2.0"], "not a published release"),
        (["--engine", "sglang", "--releases", "0.4.3", "--wheels", "EMPTY"], "no sglang-0.4.3"),
        (["--engine", "sglang", "--releases", "0.4.3", "--wheels", "BARE"], "holds none of"),
    ],
)
def test_errors_are_one_line(tmp_path, capsys, argv, says):
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "BARE").mkdir()
    with zipfile.ZipFile(tmp_path / "BARE" / "sglang-0.4.3-py3-none-any.whl", "w") as zf:
        zf.writestr("sglang/srt/models/llama.py", "x = 1\n")
    argv = [str(tmp_path / a) if a in ("EMPTY", "BARE") else a for a in argv]
    assert main([*argv, "--out", str(tmp_path), "--cache", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and err.startswith("error: ")


KINDS = {"default", "derived", "kernel", "scheduling", "memory", "added", "removed"}


@pytest.mark.parametrize("engine", sorted(SPECS))
def test_committed_changelog_covers_every_published_release(engine):
    log = changes.read_changelog(OUT / f"{engine}.yaml")
    assert log["engine"] == engine
    releases, unread = log["releases"] or {}, log["unread"] or {}
    wanted = [r for r in PUBLISHED[engine] if release_key(r) >= release_key(SPECS[engine].first)]
    assert set(releases) | set(unread) == set(wanted)
    assert not set(releases) & set(unread)
    assert all(why.strip() for why in unread.values())
    read = sorted(releases, key=release_key)
    modelled = modelled_names(engine)
    for previous, release in zip([None, *read], read, strict=False):
        entry = releases[release]
        assert entry["compared_with"] == previous
        assert entry["read_from"]
        assert entry["modelled_change"] == (
            None if previous is None else any(c["modelled"] for c in entry["changes"])
        )
        for change in entry["changes"]:
            assert change["kind"] in KINDS
            marked = change["setting"] in modelled and not changes.off_platform(change)
            assert change["modelled"] == marked, (
                f"{engine} {release} {change['setting']}: the simulator's names changed since "
                "the changelog was marked: python -m tools.engine_changelog --remark"
            )
            files = entry["read_from"] + releases[previous]["read_from"]  # removed: the old
            assert change["file"] in files
            assert change["setting"] and change["source"]
            assert repr(change["before"]) != repr(change["after"])  # False -> 0 is a change


def test_coverage_table_lists_every_release_in_range():
    text = coverage.table(OUT)
    for engine in SPECS:
        for release in coverage.in_range(engine):
            assert f"| {release} |" in text
    assert "checked: no modelled change" in text


def test_every_pr_names_a_change_of_its_release():
    prs = changes.read_changelog(OUT / "prs.yaml")
    assert prs, "sim/engines/changelogs/prs.yaml"
    for engine, by_release in prs.items():
        releases = changes.read_changelog(OUT / f"{engine}.yaml")["releases"]
        for release, by_setting in by_release.items():
            for setting, pr in by_setting.items():
                found = [c for c in releases[release]["changes"] if c["setting"] == setting]
                assert found and all(c.get("pr") == pr for c in found), (engine, release, setting)


def test_a_reviewed_release_is_checked_and_leaves_the_missing_list(tmp_path):
    """A release that runs with an earlier rule set although its changelog names a modelled
    change is "checked" once reviewed_<engine>.yaml lists every one of its modelled settings
    (with why); a partial review leaves it in --missing with the rest; a bad file is refused."""
    import shutil

    import yaml

    for engine in SPECS:
        shutil.copy(OUT / f"{engine}.yaml", tmp_path / f"{engine}.yaml")
    missing = coverage.without_rule_set(tmp_path)
    engine, release, named = next(m for m in missing if len(m[2]) >= 2)
    settings = [n.split(" (")[0] for n in named]
    partial = {release: [{"setting": settings[0], "why": "a branch no catalogue run takes"}]}
    (tmp_path / f"reviewed_{engine}.yaml").write_text(yaml.safe_dump(partial))
    left = {(e, r): n for e, r, n in coverage.without_rule_set(tmp_path)}
    assert [n.split(" (")[0] for n in left[(engine, release)]] == settings[1:]
    full = {release: [{"setting": s, "why": "reworded, same outcome"} for s in settings]}
    (tmp_path / f"reviewed_{engine}.yaml").write_text(yaml.safe_dump(full))
    assert (engine, release) not in {(e, r) for e, r, _ in coverage.without_rule_set(tmp_path)}
    row = next(x for x in coverage.table(tmp_path).splitlines() if x.startswith(f"| {release} |"))
    assert "checked: no modelled change (vs" in row and "reviewed" in row
    (tmp_path / f"reviewed_{engine}.yaml").write_text(yaml.safe_dump({release: [{"x": 1}]}))
    with pytest.raises(UserError, match="each item needs a setting and a why"):
        coverage.table(tmp_path)

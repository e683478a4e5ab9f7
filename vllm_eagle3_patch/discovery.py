"""Families by rule: every registered text-generation architecture the hand-kept catalog does not name.

The release's registry maps each architecture to a module and class; the runner holds that class.
Its chain (its bases, resolved through the files' own imports) is walked for the first class whose
``__init__`` builds a model class of its own file (``self.model = MixtralModel(...)``,
``self.transformer = GPT2Model(...)``): that class is the causal LM, the model is the decoder,
and the pair is a :class:`~vllm_eagle3_patch.codemod.family.Family` like the catalog's.  Whether
the decoder's ``forward`` has a loop the codemod recognises is the codemod's to say (the file's
verdict), so every architecture found here ends patchable or refused with the codemod's reason.
What structure cannot tell, the model type the speculative-config gate judges, is the one table
here (:data:`MODEL_TYPES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Union

from .codemod.family import Family, FoundWrapper, Wrapper
from .codemod.two_processes import on_two_processes
from .eagle3.class_chain import Chain, ChainReader, ClassInfo
from .eagle3.modules import module_of, registry_module
from .eagle3.release import MIXIN, Release
from .errors import ToolError
from .multimodal import find_wrapper, held_answers_model, held_language_model_refusal

MODEL_TYPES: dict[str, tuple[str, ...]] = {
    "CohereForCausalLM": ("cohere",),
    "Cohere2ForCausalLM": ("cohere2",),
    "Ernie4_5_MoeForCausalLM": ("ernie4_5_moe",),
    "Ernie4_5ForCausalLM": ("ernie4_5",),
    "GPTJForCausalLM": ("gptj",),
    "Olmo3ForCausalLM": ("olmo3",),
    "MiniMaxForCausalLM": ("minimax",),
    "MiniMaxText01ForCausalLM": ("minimax", "minimax_text_01"),
    "MiniMaxM1ForCausalLM": ("minimax_m1",),
    "RWForCausalLM": ("falcon", "RefinedWeb", "RefinedWebModel"),
    "FalconMambaForCausalLM": ("falcon_mamba",),
    "StableLMEpochForCausalLM": ("stablelm_epoch", "stablelm"),
    "Grok1ModelForCausalLM": ("grok-1",),
    "Grok1ForCausalLM": ("grok-1",),
    "BaichuanForCausalLM": ("baichuan",),
    "BaiChuanForCausalLM": ("baichuan",),
    "GraniteMoeForCausalLM": ("granitemoe",),
    "GraniteMoeSharedForCausalLM": ("granitemoeshared",),
    "GraniteMoeHybridForCausalLM": ("granitemoehybrid",),
    "NemotronHPuzzleForCausalLM": ("nemotron_h", "nemotron_h_puzzle"),
    "DeciLMForCausalLM": ("deci", "nemotron-nas"),
    "PanguEmbeddedForCausalLM": ("PanguEmbedded",),
    "PanguProMoEV2ForCausalLM": ("PanguProMoE",),
    "PanguUltraMoEForCausalLM": ("pangu_ultra_moe",),
    "Step3TextForCausalLM": ("step3_text", "step3"),
    "Step3p5ForCausalLM": ("step3p5",),
    "MptForCausalLM": ("mpt",),
    "MPTForCausalLM": ("mpt",),
    "JAISLMHeadModel": ("jais",),
    "GPT2LMHeadModel": ("gpt2", "gpt-sw3"),
    "QWenLMHeadModel": ("qwen",),
    "AXK1ForCausalLM": ("AXK1", "axk1"),
    "GraniteMoeSWAForCausalLM": ("granitemoe_swa",),
    "KimiLinearForCausalLM": ("kimi_linear",),
    "Ministral3ForCausalLM": ("ministral3",),
    "GlmMoeDsaForCausalLM": ("glm_moe_dsa",),
    "CwmForCausalLM": ("cwm",),
    # several architectures of one module, each checkpoint naming its own type (a bare name is judged by these)
    "DeepseekV3ForCausalLM": ("deepseek_v3", "kimi_k2"),  # Kimi-K2's checkpoints name this architecture
    "DeepseekV32ForCausalLM": ("deepseek_v32",),
    "Gemma3ForCausalLM": ("gemma3_text",),
    "Gemma3nForCausalLM": ("gemma3n_text",),
    "Gemma4ForCausalLM": ("gemma4_text",),
    "HunYuanDenseV1ForCausalLM": ("hunyuan_v1_dense",),
    "HunYuanMoEV1ForCausalLM": ("hunyuan_v1_moe",),
    "Llama4ForCausalLM": ("llama4_text", "llama4"),
    "MiMoV2FlashForCausalLM": ("mimo_v2_flash",),
    "GraniteSWAForCausalLM": ("granite_swa",),
    "Qwen3_5ForCausalLM": ("qwen3_5_text", "qwen3_5"),
    "Qwen3_5MoeForCausalLM": ("qwen3_5_moe_text", "qwen3_5_moe"),
    "Qwen4ExpForCausalLM": ("qwen4_exp_text", "qwen4_exp"),
    "InklingForCausalLM": ("inkling_text",),
    "InklingForConditionalGeneration": ("inkling_mm_model",),
    # multimodal classes whose checkpoints name another type than their module (transformers' own mapping)
    "Blip2ForConditionalGeneration": ("blip-2",),
    "Ernie4_5_VLMoeForConditionalGeneration": ("ernie4_5_vl_moe",),
    "Gemma3ForConditionalGeneration": ("gemma3",),
    "Gemma3nForConditionalGeneration": ("gemma3n",),
    "Gemma4ForConditionalGeneration": ("gemma4",),
    "Glm4vForConditionalGeneration": ("glm4v",),
    "Glm4vMoeForConditionalGeneration": ("glm4v_moe",),
    "Glm5NextForConditionalGeneration": ("glm5_next",),
    "HunYuanVLForConditionalGeneration": ("hunyuan_vl",),
    "InternVLForConditionalGeneration": ("internvl",),
    "Llama4ForConditionalGeneration": ("llama4",),
    "MiniMaxM3SparseForConditionalGeneration": ("minimax_m3_vl",),
    "NemotronH_Omni_Reasoning_V3": ("nemotron_h_omni",),
    "Qwen2_5OmniModel": ("qwen2_5_omni",),
    "Qwen2_5OmniForConditionalGeneration": ("qwen2_5_omni",),
    "Qwen3OmniMoeForConditionalGeneration": ("qwen3_omni_moe",),
    "Qwen3_5MoeForConditionalGeneration": ("qwen3_5_moe",),
    # served by another architecture's module (llama.py), their checkpoints name their own type
    "AquilaModel": ("aquila",),
    "AquilaForCausalLM": ("aquila",),
    "InternLMForCausalLM": ("internlm",),
    "InternLM3ForCausalLM": ("internlm3",),
    "XverseForCausalLM": ("xverse",),
    "TeleChatForCausalLM": ("telechat",),
    "TeleChat2ForCausalLM": ("telechat",),
}
"""``hf_text_config.model_type`` of an architecture's checkpoints where it is not the registry's
module name (``commandr`` serves ``cohere`` and ``cohere2``).  The one thing structure cannot tell:
``tests/test_architectures.py`` checks that the rule and this table name every type transformers' own mapping
gives an architecture, exactly (a bare architecture name is judged by each of them, and the gate matches by
substring, so ``hunyuan_v1`` would admit both HunYuan types though the gate judges each apart); the remote-code
models transformers does not know are listed from their checkpoints' ``config.json``."""


@dataclass(frozen=True)
class PlatformVariant:
    """One platform's class of an architecture whose package picks it per platform (``vllm.models.hy_v4``
    imports ``nvidia/model.py``'s on CUDA, ``amd/model.py``'s on ROCm)."""

    path: str
    """The variant's file, relative to ``vllm/``."""
    cls: str
    cuda: bool
    """The class a CUDA process imports (``eagle3/platforms.py``): its verdict decides."""
    native: bool = False
    family: Optional[tuple[str, str]] = None
    """(file, causal LM) of the family that patches it, catalogued or found by rule."""
    refusal: Optional[str] = None
    """Why neither: what the rule did not find."""
    wrapper: Optional[str] = None
    """For a multimodal class: the key in ``Discovery.wrappers`` of the wrapper found by rule that serves it
    (``<architecture>@<file>``: one per platform's class)."""


@dataclass(frozen=True)
class Discovery:
    """The families found by rule, and why each other refused architecture has none."""

    families: tuple[Family, ...]
    architectures: dict[str, Family] = field(default_factory=dict)
    """Each architecture served by a found family."""
    unrecognised: dict[str, str] = field(default_factory=dict)
    """Each architecture without one -> the reason."""
    native: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each architecture whose registered class implements EAGLE-3 itself -> its checkpoints' model types: the
    runner accepts it, and on releases with a whitelist only the gate can still refuse it (Mistral on 0.17.1)."""
    wrappers: dict[str, FoundWrapper] = field(default_factory=dict)
    """Each multimodal architecture served through a wrapper found by rule (``multimodal.py``); a class a package
    picks per platform under ``<architecture>@<file>`` (``PlatformVariant.wrapper``)."""
    encoder_decoder: tuple[str, ...] = ()
    """The multimodal architectures refused as encoder-decoder models (Whisper), which no rule serves."""
    per_platform: dict[str, tuple[PlatformVariant, ...]] = field(default_factory=dict)
    """The architectures whose class a platform-split package picks per platform -> each platform's class, judged
    apart: a target where the class CUDA imports is served (every variant, where none is CUDA's by its package)."""

    def family_of(self, key: tuple[str, str], known: tuple[Family, ...] = ()) -> Optional[Family]:
        """The family (catalogued in ``known``, or found) whose (file, causal LM) is ``key``."""
        return next((f for f in (*known, *self.families) if (f.path, f.causal_lm) == tuple(key)), None)


def discover(release: Release, known: tuple[Family, ...], meanwhile: Callable[[], object] = lambda: None) -> Discovery:
    """A family for every registered architecture whose class lacks EAGLE-3 and that no family of ``known``
    serves, keyed by (file, causal LM), in the registry's order; then for every multimodal one, the wrapper
    that hands EAGLE-3 on to its language model (``multimodal.py``), or a family of its own where it holds a
    decoder of its own file as a causal LM does (Molmo's ``self.model = MolmoModel(...)``).  ``meanwhile`` is the
    caller's own work, done here while the second process parses (``two_processes.on_two_processes``)."""
    chains = ChainReader(release.read, release.layouts)
    registries = (release.text_generation_models, release.multimodal_models)
    chains.read_chains_ahead(
        ((registry_module(module), cls) for models in registries for module, cls in models.values()),
        lambda jobs, weights: on_two_processes(jobs, weights, meanwhile),
    )
    finder = _FamilyFinder(release, chains, known)
    for architecture, (module, cls) in release.text_generation_models.items():
        chain = finder.judged(architecture, module, cls)
        if chain is not None:
            finder.found_by_rule(architecture, module, chain)
    for architecture, (module, cls) in release.multimodal_models.items():
        chain = finder.judged(architecture, module, cls)
        if chain is None or finder.served_by_a_found_family(architecture, module, chain):
            continue
        wrapper = find_wrapper(release, chains, chain, finder.families)
        held_in = chain.classes[0].returns_from
        if isinstance(wrapper, FoundWrapper):
            finder.wrappers[architecture] = replace(wrapper, model_types=model_types(architecture, module))
        elif wrapper.decoder_only is False or held_in is None:
            refusal = _own_decoder_refusal(release, chains, chain, finder.families)
            finder.unrecognised[architecture] = refusal or wrapper.reason
            finder.encoder_decoder += (architecture,) if wrapper.decoder_only is False else ()
        elif refusal := _own_decoder_refusal(release, chains, chain, finder.families):
            finder.unrecognised[architecture] = refusal
        elif not finder.found_by_rule(
            architecture, module, chain, held_in, held_answers_model(release, chains, chain, held_in)
        ):
            finder.unrecognised[architecture] = wrapper.reason
    return finder.discovery()


class _FamilyFinder:
    """What :func:`discover` has found so far."""

    def __init__(self, release: Release, chains: ChainReader, known: tuple[Family, ...]) -> None:
        self.release = release
        self.chains = chains
        self.known = known
        self.found: dict[tuple[str, str], Family] = {}
        self.architectures: dict[str, tuple[str, str]] = {}
        self.unrecognised: dict[str, str] = {}
        self.native: dict[str, tuple[str, ...]] = {}
        self.wrappers: dict[str, FoundWrapper] = {}
        self.encoder_decoder: tuple[str, ...] = ()
        self.per_platform: dict[str, tuple[PlatformVariant, ...]] = {}

    @property
    def families(self) -> tuple[Family, ...]:
        return (*self.known, *self.found.values())

    def judged(self, architecture: str, module: str, cls: str) -> Optional[Chain]:
        """The chain of a registered class still to be judged: not native, not a known family's, not one picked
        per platform (native only where every platform's class is)."""
        variants = self.chains.platform_variants(registry_module(module), cls)
        if variants:
            cuda = self.chains.cuda_variant(registry_module(module), cls)
            multimodal = architecture in self.release.multimodal_models
            judged = tuple(
                self._variant(architecture, module, variant, variant == cuda, multimodal) for variant in variants
            )
            self.per_platform[architecture] = judged
            if all(v.native for v in judged if v.cuda) and any(v.cuda for v in judged):
                self.native[architecture] = model_types(architecture, module)
            return None
        chain = self.chains.registered(module, cls)
        if chain is not None and chain.declares_eagle3:
            self.native[architecture] = model_types(architecture, module)
        if chain is None or chain.declares_eagle3:
            return None
        return None if any(chain.includes(module_of(f.path), f.causal_lm) for f in self.known) else chain

    def served_by_a_found_family(self, architecture: str, module: str, chain: Chain) -> bool:
        """A multimodal class on a found family's causal LM chain (``GLM4VForCausalLM(ChatGLMBaseModel)``), where
        the proposer can take the embedding from its language model (else it is refused, with that reason)."""
        key = next((k for k in self.found if chain.includes(*k)), None)
        if key is None:
            return False
        attribute = self.found[key].decoder.split(".")[1]
        refusal = held_language_model_refusal(self.release, self.chains, chain, attribute, self.families)
        if refusal is not None:
            self.unrecognised[architecture] = refusal
            return True
        family = self.found[key]
        if held_answers_model(self.release, self.chains, chain, attribute):
            family = replace(family, answers_model=True)
        self._add(architecture, key, family, model_types(architecture, module))
        return True

    def _variant(
        self, architecture: str, module: str, variant: ClassInfo, cuda: bool, multimodal: bool
    ) -> PlatformVariant:
        """One platform's class, judged as a registered class is: native, a catalogued family's, a multimodal wrapper
        or a family found by rule (added to those ``apply`` patches), else refused with what the rule did not find."""
        path = f"{variant.module.replace('.', '/')}.py"
        chain = self.chains.chain(variant.module, variant.name)
        if chain is None:
            return PlatformVariant(path, variant.name, cuda, refusal=f"no class {variant.name} this tool can read")
        if chain.declares_eagle3:
            return PlatformVariant(path, variant.name, cuda, native=True)
        known = next((f for f in self.known if chain.includes(module_of(f.path), f.causal_lm)), None)
        if known is not None:
            return PlatformVariant(path, variant.name, cuda, family=(known.path, known.causal_lm))
        if multimodal:
            wrapper = find_wrapper(self.release, self.chains, chain, self.families)
            if isinstance(wrapper, FoundWrapper):
                wrapper_key = f"{architecture}@{path}"
                self.wrappers[wrapper_key] = replace(wrapper, model_types=model_types(architecture, module))
                return PlatformVariant(path, variant.name, cuda, wrapper=wrapper_key)
        found = self._family_by_rule(variant.module, chain)
        if isinstance(found, str):
            return PlatformVariant(path, variant.name, cuda, refusal=found)
        key, family = found
        self.found[key] = _with_types(family, model_types(architecture, module))
        return PlatformVariant(path, variant.name, cuda, family=(family.path, family.causal_lm))

    def _family_by_rule(
        self, module: str, chain: Chain, attribute: Optional[str] = None
    ) -> Union[tuple[tuple[str, str], Family], str]:
        """The family of a class that builds a decoder of its own file (in ``attribute``, where given) and its key,
        or why there is none."""
        held = _held_model(self.chains, chain.classes, attribute)
        if held is None:
            return (
                f"{chain.classes[0].name} ({module}.py): no class on its chain builds a model class of its own file "
                "in __init__ (self.model = <Model>(...)), which would be the decoder"
            )
        causal_lm, held_in, model = held
        key = (causal_lm.module, causal_lm.name)
        family = self.found.get(key) or Family(
            causal_lm.name,
            f"{causal_lm.module.replace('.', '/')}.py",
            model.name,
            causal_lm.name,
            (),
            decoder=f"self.{held_in}",
            forward_from=_forward_from(self.chains, model, self.families),
            runs_upstream_capture=_runs_upstream_capture(self.chains, model),
        )
        return key, family

    def found_by_rule(
        self,
        architecture: str,
        module: str,
        chain: Chain,
        attribute: Optional[str] = None,
        answers_model: bool = False,
    ) -> bool:
        """The family of a class that builds a decoder of its own file (in ``attribute``, where given), whose
        model (what the class runs as its language model) ``answers_model`` with itself where asked."""
        found = self._family_by_rule(module, chain, attribute)
        if isinstance(found, str):
            self.unrecognised[architecture] = found
            return False
        key, family = found
        types = model_types(architecture, module)
        self._add(architecture, key, replace(family, answers_model=family.answers_model or answers_model), types)
        return True

    def _add(self, architecture: str, key: tuple[str, str], family: Family, types: tuple[str, ...]) -> None:
        self.found[key] = _with_types(family, types)
        self.architectures[architecture] = key  # the family's last form: its types grow with each architecture
        self.unrecognised.pop(architecture, None)

    def discovery(self) -> Discovery:
        architectures = {a: self.found[key] for a, key in self.architectures.items()}
        return Discovery(
            tuple(self.found.values()),
            architectures,
            self.unrecognised,
            self.native,
            self.wrappers,
            self.encoder_decoder,
            self.per_platform,
        )


def encode(discovery: Discovery) -> dict:
    """A JSON form of ``discovery`` for the cache: a family by its file and causal LM (:func:`_key`), since two
    files may hold causal LMs of one name (``mixtral.py`` and ``mixtral_quant.py``: ``MixtralForCausalLM``)."""

    def family(f: Family) -> dict:
        fields = {k: v for k, v in vars(f).items() if k not in ("forward_from", "policy")}
        return {**fields, "forward_from": _key(f.forward_from) if f.forward_from else None}

    def wrapper(w: FoundWrapper) -> dict:
        return {**vars(w), "wrapper": vars(w.wrapper), "family": _key(w.family) if w.family else None}

    return {
        "families": [family(f) for f in discovery.families],
        "architectures": {a: _key(f) for a, f in discovery.architectures.items()},
        "unrecognised": discovery.unrecognised,
        "native": discovery.native,
        "wrappers": {a: wrapper(w) for a, w in discovery.wrappers.items()},
        "encoder_decoder": list(discovery.encoder_decoder),
        "per_platform": {a: [vars(v) for v in variants] for a, variants in discovery.per_platform.items()},
    }


def _key(family: Family) -> list[str]:
    return [family.path, family.causal_lm]


def decoder(known: tuple[Family, ...]) -> Callable[[object], Discovery]:
    """The inverse of :func:`encode`, resolving ``forward_from`` among ``known`` and the found families."""

    def decode(data: object) -> Discovery:
        if not isinstance(data, dict):
            raise TypeError("not a discovery")  # the cache treats it as absent
        by_key = {tuple(_key(f)): f for f in known}
        families = []
        for entry in data["families"]:
            forward_from = by_key[tuple(entry["forward_from"])] if entry["forward_from"] else None
            fields = {**entry, "model_types": tuple(entry["model_types"]), "forward_from": forward_from}
            family = Family(**fields)
            by_key[tuple(_key(family))] = family
            families.append(family)
        architectures = {a: by_key[tuple(key)] for a, key in data["architectures"].items()}
        native = {a: tuple(types) for a, types in data["native"].items()}
        wrappers = {
            a: FoundWrapper(
                **{
                    **w,
                    "wrapper": Wrapper(**w["wrapper"]),
                    "model_types": tuple(w["model_types"]),
                    "family": by_key[tuple(w["family"])] if w["family"] else None,
                },
            )
            for a, w in data["wrappers"].items()
        }
        unrecognised = dict(data["unrecognised"])
        encoder_decoder = tuple(data["encoder_decoder"])
        per_platform = {
            a: tuple(PlatformVariant(**{**v, "family": tuple(v["family"]) if v["family"] else None}) for v in variants)
            for a, variants in data["per_platform"].items()
        }
        return Discovery(tuple(families), architectures, unrecognised, native, wrappers, encoder_decoder, per_platform)

    return decode


def serving(
    release: Release, architectures: tuple[str, ...], families: tuple[Family, ...], discovery: Discovery
) -> set[str]:
    """The names of the ``families`` that serve ``architectures`` (``apply --only``): those whose causal
    LM is on the registered class's chain; and of the multimodal wrappers found by rule that serve them, with
    their language models' families.  An unknown name is refused."""
    chains = ChainReader(release.read, release.layouts)
    names: set[str] = set()
    for architecture in architectures:
        if architecture not in release.registry:
            raise ToolError(
                f"{architecture}: this vLLM registers no such architecture (`status --architectures` lists them)"
            )
        found = discovery.wrappers.get(architecture)
        names.update((found.name, *([found.family.name] if found.family else [])) if found else ())
        chain = chains.registered(*release.registry[architecture])
        served = [f.name for f in families if chain is not None and chain.includes(module_of(f.path), f.causal_lm)]
        names.update(served)
        for variant in discovery.per_platform.get(architecture, ()):  # every platform's class: each is patched
            family = discovery.family_of(variant.family, families) if variant.family else None
            names.update([family.name] if family else [])
            wrapper = discovery.wrappers.get(variant.wrapper) if variant.wrapper else None
            names.update((wrapper.name, *([wrapper.family.name] if wrapper.family else [])) if wrapper else ())
    return names


def model_types(architecture: str, module: str) -> tuple[str, ...]:
    """The model types an architecture's checkpoints name: the table's, else the module's name."""
    return MODEL_TYPES.get(architecture, (registry_module(module).rsplit(".", 1)[-1],))


def _held_model(
    chains: ChainReader, classes: tuple[ClassInfo, ...], held_in: Optional[str] = None
) -> Optional[tuple[ClassInfo, str, ClassInfo]]:
    """``(causal LM, attribute, model)``: the first class of the chain whose ``__init__`` builds a
    class of its own file (the model, which has a ``forward`` or inherits one), in ``held_in`` where given."""
    for cls in classes:
        for attribute, callee in cls.holds:
            if held_in is not None and attribute != held_in:
                continue
            model = chains.defined_in(cls.module, callee)
            if model is not None and _is_module(chains, model):
                inner = _inner_decoder(chains, model)
                return (cls, f"{attribute}.{inner[0]}", inner[1]) if inner else (cls, attribute, model)
    return None


def _own_decoder_refusal(
    release: Release, chains: ChainReader, chain: Chain, families: tuple[Family, ...]
) -> Optional[str]:
    """Why the proposer could not take the embedding from a decoder of its own file that the multimodal class's
    ``forward`` runs as its language model (Molmo's ``self.model = MolmoModel(...)``), or None: no such decoder,
    or one it can (``multimodal.held_language_model_refusal``)."""
    runs = next((c for c in chain.classes if "forward" in c.methods), None)
    attribute = runs.returns_from if runs is not None else None
    if (
        runs is None
        or attribute is None
        or runs.reads_encoder_outputs
        or _held_model(chains, chain.classes, attribute) is None
    ):
        return None
    return held_language_model_refusal(release, chains, chain, attribute, families)


def _inner_decoder(chains: ChainReader, model: ClassInfo) -> Optional[tuple[str, ClassInfo]]:
    """``(attribute, decoder)`` where ``model``'s ``forward`` loops over nothing and hands the work to
    a class of its file that loops (``OPTModel`` -> ``self.decoder``, ``ChatGLMModel`` -> ``self.encoder``)."""
    if model.loops or "forward" not in model.methods:
        return None
    for attribute, callee in model.holds:
        inner = chains.defined_in(model.module, callee)
        if inner is not None and inner.loops:
            return attribute, inner
    return None


def _is_module(chains: ChainReader, cls: ClassInfo) -> bool:
    """Whether ``cls`` has a ``forward`` of its own or from a model file's base."""
    chain = chains.chain(cls.module, cls.name)
    return chain is not None and any("forward" in c.methods for c in chain.classes)


def _forward_from(chains: ChainReader, model: ClassInfo, families: tuple[Family, ...]) -> Optional[Family]:
    """The family whose model's ``forward`` ``model`` runs: it has none of its own, and its first
    base with one is that family's model (``FlashNgramModel(FlashModel)``, LongCat-Flash's)."""
    if "forward" in model.methods:
        return None
    chain = chains.chain(model.module, model.name)
    runs = next((c for c in chain.classes[1:] if "forward" in c.methods), None) if chain else None
    return next(
        (f for f in families if runs is not None and (module_of(f.path), f.model) == (runs.module, runs.name)), None
    )


def _runs_upstream_capture(chains: ChainReader, model: ClassInfo) -> bool:
    """Whether ``model`` has no ``forward`` and its first base with one is an upstream collecting
    decoder of another file (``EagleModelMixin`` among its bases)."""
    if "forward" in model.methods:
        return False
    chain = chains.chain(model.module, model.name)
    runs = next((c for c in chain.classes[1:] if "forward" in c.methods), None) if chain else None
    return runs is not None and runs.module != model.module and any(b.endswith(MIXIN) for b in runs.bases)


def _with_types(family: Family, types: tuple[str, ...]) -> Family:
    merged = (*family.model_types, *(t for t in types if t not in family.model_types))
    return replace(family, model_types=merged)

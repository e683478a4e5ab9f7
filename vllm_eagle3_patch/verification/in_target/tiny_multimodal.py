"""Tiny random vision-language targets for the multimodal rule's engine run: a tiny text target of
``tiny_models.TARGETS`` inside transformers' own wrapper class, beside a tiny random vision tower, with
a processor built locally (tokenizer and image processor; nothing downloaded).

vLLM serves each through its registered multimodal wrapper (``llava_next.py``, ``llava_onevision.py``,
``blip2.py``, ``paligemma.py``, ...), which builds the language model (``init_vllm_registered_model``, or
its own class: ``aria.py``, ``paddleocr_vl.py``): the wrapper is the class the runner holds and asks for
EAGLE-3.  Transformers' wrapper is the numeric reference, with the image: its greedy tokens, and its language
model's ``output_hidden_states`` at every position (image placeholders included, where the merged embeddings
enter the decoder).

One prompt is text only, the other starts with an image (a small synthetic picture both sides build
from the same seed).  vLLM is given the image placeholder once and expands it as its processor does
(or, for BLIP-2 and PaliGemma, inserts every placeholder itself);
the reference holds the ids transformers' processor expanded, which the engine must reproduce.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import tiny_models

IMAGE_SIZE = 28
PATCH_SIZE = 14
IMAGE_TOKEN = tiny_models.VOCAB - 1
VIDEO_TOKEN = tiny_models.VOCAB - 2
NEWLINE_TOKEN = tiny_models.VOCAB - 3
SPECIAL_WORDS = {IMAGE_TOKEN: "<image>", VIDEO_TOKEN: "<video>"}
IMAGE_SEEDS = range(3, 24)
"""The synthetic pictures tried for the image prompt (``synthetic_image``), the first that suits taken."""
VISION_TOWER = {
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 2,  # LLaVA-NeXT reads the second-to-last layer
    "num_attention_heads": 2,
    "image_size": IMAGE_SIZE,
    "patch_size": PATCH_SIZE,
}
PINPOINTS = [[IMAGE_SIZE, IMAGE_SIZE]]
"""One any-resolution grid: the picture is one tile beside its resized whole."""


@dataclass(frozen=True)
class TinyWrapper:
    """How transformers builds one multimodal architecture around a tiny text target."""

    architecture: str
    """vLLM's registered multimodal architecture (``_MULTIMODAL_MODELS``) and transformers' class."""
    config_class: str
    language_model: str
    """The text family inside (``tiny_models.TARGETS``)."""
    config: Callable[[], dict[str, Any]]
    processor: Callable[[Any], Any]
    """The processor, from the tokenizer."""
    placeholder_given: bool = True
    """Whether the prompt names the image with one placeholder (vLLM expands it), or vLLM inserts every
    placeholder itself (BLIP-2's query tokens, at the start)."""
    text_only: Callable[[Any], Any] = lambda model: model
    """What serves a prompt without an image in transformers (BLIP-2's wrapper always wants pixels)."""
    language_model_config: dict[str, Any] = field(default_factory=dict)
    """What the language model's tiny config differs in here (``tiny_models.target_config``)."""
    special_words: dict[int, str] = field(default_factory=dict)
    """Special words the tokenizer needs beside ``SPECIAL_WORDS``, by id (PaliGemma's newline)."""
    named_placeholder: bool = False
    """Whether the tokenizer must name the image placeholder (``tokenizer.image_token``: Aria's processor reads it)."""
    token_types: bool = False
    """Whether transformers' model wants ``mm_token_type_ids`` beside the ids (PaddleOCR-VL's M-RoPE places the
    picture by them): derived from the ids at every call (``_with_token_types``), since the processor's cover the
    prompt only and the reference runs the whole sequence."""


def _llava_next_config() -> dict[str, Any]:
    return {
        "vision_config": {"model_type": "clip_vision_model", **VISION_TOWER, "projection_dim": 64},
        "image_token_index": IMAGE_TOKEN,
        "image_grid_pinpoints": PINPOINTS,
        "vision_feature_select_strategy": "default",  # the class token dropped
        "vision_feature_layer": -2,
        "image_seq_length": (IMAGE_SIZE // PATCH_SIZE) ** 2,
    }


def _llava_next_processor(tokenizer: Any) -> Any:
    import transformers

    image_processor = transformers.LlavaNextImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_grid_pinpoints=PINPOINTS,
    )
    return transformers.LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's class token
    )


def _llava_onevision_config() -> dict[str, Any]:
    return {
        "vision_config": {"model_type": "siglip_vision_model", **VISION_TOWER},
        "image_token_index": IMAGE_TOKEN,
        "video_token_index": VIDEO_TOKEN,
        "image_grid_pinpoints": PINPOINTS,
        "vision_feature_select_strategy": "full",
        "vision_feature_layer": -1,
    }


def _llava_onevision_processor(tokenizer: Any) -> Any:
    import transformers

    image_processor = transformers.LlavaOnevisionImageProcessor(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, image_grid_pinpoints=PINPOINTS
    )
    return transformers.LlavaOnevisionProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=transformers.LlavaOnevisionVideoProcessor(),  # needs torchvision: 0.17.1's environment
        num_image_tokens=(IMAGE_SIZE // PATCH_SIZE) ** 2,
        vision_feature_select_strategy="full",
    )


def _blip2_config() -> dict[str, Any]:
    return {
        "vision_config": VISION_TOWER,
        "qformer_config": {
            "hidden_size": 64,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "encoder_hidden_size": VISION_TOWER["hidden_size"],
        },
        "num_query_tokens": BLIP2_QUERIES,
        "image_token_index": IMAGE_TOKEN,
    }


def _blip2_processor(tokenizer: Any) -> Any:
    import transformers

    image_processor = transformers.BlipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return transformers.Blip2Processor(
        image_processor=image_processor, tokenizer=tokenizer, num_query_tokens=BLIP2_QUERIES
    )


def _paligemma_config() -> dict[str, Any]:
    return {
        "vision_config": {"model_type": "siglip_vision_model", **VISION_TOWER, "vision_use_head": False},
        "image_token_index": IMAGE_TOKEN,
        "projection_dim": tiny_models.HIDDEN,
        "hidden_size": tiny_models.HIDDEN,
        "vocab_size": tiny_models.VOCAB,
    }


def _paligemma_processor(tokenizer: Any) -> Any:
    import transformers

    image_processor = transformers.SiglipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    image_processor.image_seq_length = (IMAGE_SIZE // PATCH_SIZE) ** 2  # what PaliGemma's processor reads
    return transformers.PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)


ARIA_IMAGE_SIZE = 980
"""The one crop size transformers' Aria processor takes by default (490 or 980) for every picture; vLLM calls it so."""
ARIA_QUERIES = 4
"""The projector's queries per picture: the placeholders it stands for."""


def _aria_config() -> dict[str, Any]:
    patches = (ARIA_IMAGE_SIZE // PATCH_SIZE) ** 2
    return {
        "vision_config": {**VISION_TOWER, "image_size": ARIA_IMAGE_SIZE},
        "projector_patch_to_query_dict": {patches: ARIA_QUERIES},
        "image_token_index": IMAGE_TOKEN,
    }


def _aria_processor(tokenizer: Any) -> Any:
    import transformers

    image_processor = transformers.AriaImageProcessor(max_image_size=ARIA_IMAGE_SIZE)
    return transformers.AriaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, size_conversion={ARIA_IMAGE_SIZE: ARIA_QUERIES}
    )


PADDLEOCR_IMAGE_SIZE = 56
"""The size PaddleOCR-VL's processor resizes every picture to (its pixel bounds both this squared): 4 x 4 patches,
merged 2 x 2 into 4 placeholders."""
PADDLEOCR_MROPE_SECTION = [4, 6, 6]
"""M-RoPE's split of the 16 rotary frequencies (head_dim 32) among time, height and width."""


def _paddleocr_vl_config() -> dict[str, Any]:
    return {
        "vision_config": {**VISION_TOWER, "image_size": PADDLEOCR_IMAGE_SIZE, "spatial_merge_size": 2},
        "image_token_id": IMAGE_TOKEN,
        "video_token_id": VIDEO_TOKEN,
        "vision_start_token_id": NEWLINE_TOKEN,  # named by the config; neither side reads it for a picture
        "vision_end_token_id": NEWLINE_TOKEN - 1,
    }


def _paddleocr_vl_processor(tokenizer: Any) -> Any:
    import transformers

    pixels = PADDLEOCR_IMAGE_SIZE * PADDLEOCR_IMAGE_SIZE
    image_processor = transformers.PaddleOCRVLImageProcessorPil(  # the backend that needs no torchvision
        size={"shortest_edge": pixels, "longest_edge": pixels}, patch_size=PATCH_SIZE, merge_size=2
    )
    return transformers.PaddleOCRVLProcessor(image_processor=image_processor, tokenizer=tokenizer)


BLIP2_QUERIES = 4
WRAPPERS: dict[str, TinyWrapper] = {
    # Mixtral: a mixture of experts, and a language model this tool patches
    "llava_next": TinyWrapper(
        "LlavaNextForConditionalGeneration", "LlavaNextConfig", "mixtral", _llava_next_config, _llava_next_processor
    ),
    # Qwen2: a language model vLLM gives EAGLE-3 itself, in a wrapper that does not hand it on
    "llava_onevision": TinyWrapper(
        "LlavaOnevisionForConditionalGeneration",
        "LlavaOnevisionConfig",
        "qwen2",
        _llava_onevision_config,
        _llava_onevision_processor,
    ),
    # OPT: a language model this tool patches, whose decoder sits in model.decoder
    "blip2": TinyWrapper(
        "Blip2ForConditionalGeneration",
        "Blip2Config",
        "opt",
        _blip2_config,
        _blip2_processor,
        placeholder_given=False,
        text_only=lambda model: model.language_model,
        # OPT initialises from init_std (0.02), not initializer_range: at 0.02 it repeats one token
        language_model_config={"init_std": 0.2},
    ),
    # the same wrapper around a mixture of experts, which 0.32.0's environment loads (LLaVA's need torchvision)
    "blip2_mixtral": TinyWrapper(
        "Blip2ForConditionalGeneration",
        "Blip2Config",
        "mixtral",
        _blip2_config,
        _blip2_processor,
        placeholder_given=False,
        text_only=lambda model: model.language_model,
    ),
    # Gemma: a language model this tool patches, which vLLM's wrapper builds from the checkpoint's text config;
    # vLLM inserts the placeholders and the <bos> after them itself, and ends the prompt with a newline
    "paligemma": TinyWrapper(
        "PaliGemmaForConditionalGeneration",
        "PaliGemmaConfig",
        "gemma",
        _paligemma_config,
        _paligemma_processor,
        placeholder_given=False,
        # transformers 5 makes PaliGemma's Gemma attend both ways unless told; vLLM's attends causally
        language_model_config={"use_bidirectional_attention": False},
        special_words={NEWLINE_TOKEN: "\n"},
    ),
    # Aria's mixture of experts (shared experts beside routed ones), a model class of the wrapper's own file that
    # vLLM gives EAGLE-3 itself (a subclass of its Llama model), in a wrapper that does not hand it on
    "aria": TinyWrapper(
        "AriaForConditionalGeneration",
        "AriaConfig",
        "aria_text",
        _aria_config,
        _aria_processor,
        named_placeholder=True,
    ),
    # Ernie 4.5: a language model vLLM gives EAGLE-3 itself (Llama's), with M-RoPE (the picture's placeholders
    # placed in height and width), behind PaddleOCR-VL's own NaViT-style SigLIP tower, in a wrapper that does not
    # hand it on
    "paddleocr_vl": TinyWrapper(
        "PaddleOCRVLForConditionalGeneration",
        "PaddleOCRVLConfig",
        "ernie4_5",
        _paddleocr_vl_config,
        _paddleocr_vl_processor,
        language_model_config={
            "rope_parameters": {"rope_type": "default", "mrope_section": PADDLEOCR_MROPE_SECTION},
            "initializer_range": 0.1,  # at 0.2 its greedy continuation of the text prompt names token 0
        },
        named_placeholder=True,
        token_types=True,
    ),
}
"""The multimodal architectures a tiny target can be built for, by the name ``--family`` takes."""


def synthetic_image(size: int, seed: int) -> Any:
    """A ``size`` x ``size`` RGB picture of random pixels, the same in every interpreter."""
    from PIL import Image

    pixels = random.Random(seed).randbytes(size * size * 3)
    return Image.frombytes("RGB", (size, size), pixels)


def build_tokenizer(directory: Path, special_words: dict[int, str], named_placeholder: bool = False) -> Any:
    """``tiny_models``' word-level tokenizer, its last words the image and video placeholders and
    ``special_words`` (special tokens, so that a processor's run of placeholders splits into one id each);
    ``named_placeholder``: the image placeholder also named as ``tokenizer.image_token``."""
    from transformers import AutoTokenizer

    words = {**SPECIAL_WORDS, **special_words}
    tiny_models.build_tokenizer(directory, words)
    named = {"extra_special_tokens": {"image_token": SPECIAL_WORDS[IMAGE_TOKEN]}} if named_placeholder else {}
    tokenizer = AutoTokenizer.from_pretrained(directory, **named)
    tokenizer.add_special_tokens({"additional_special_tokens": list(words.values())})
    tokenizer.save_pretrained(directory)
    return tokenizer


def build_target(directory: Path, wrapper: str, num_layers: int) -> tuple[Any, Any]:
    """The tiny text target of the wrapper's language model inside transformers' wrapper class, beside a
    random vision tower, saved with its processor; returns the model and the processor."""
    import torch
    import transformers

    tiny = WRAPPERS[wrapper]
    text_directory = directory.parent / f"{directory.name}-language-model"
    tiny_models.build_target(
        text_directory, num_layers, family=tiny.language_model, overrides=tiny.language_model_config
    )
    text = transformers.AutoModelForCausalLM.from_pretrained(text_directory).float().eval()
    config_class = getattr(transformers, tiny.config_class)
    config = config_class(
        text_config=text.config.to_dict(),
        tie_word_embeddings=text.config.tie_word_embeddings,
        torch_dtype="float32",
        **tiny.config(),
    )
    model = getattr(transformers, tiny.architecture)(config).float().eval()
    _load_language_model(model, text)
    if hasattr(model, "query_tokens"):  # BLIP-2's start at zero: the placeholders' states would all be one
        torch.nn.init.normal_(model.query_tokens, std=1.0)
    model.save_pretrained(directory, safe_serialization=True)
    if tiny.token_types:
        model.register_forward_pre_hook(_with_token_types, with_kwargs=True)
    processor = tiny.processor(build_tokenizer(directory, tiny.special_words, tiny.named_placeholder))
    processor.save_pretrained(directory)
    return model, processor


def _with_token_types(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The call's ``mm_token_type_ids`` from its ids: 1 on the image placeholders, 0 elsewhere."""
    input_ids = kwargs.get("input_ids")
    if input_ids is not None:
        kwargs["mm_token_type_ids"] = (input_ids == IMAGE_TOKEN).int()
    return args, kwargs


def _load_language_model(model: Any, text: Any) -> None:
    """The text target's weights into the wrapper: a causal LM of its own (BLIP-2), or a decoder beside
    the wrapper's ``lm_head`` (the LLaVA family)."""
    inside = model.language_model if hasattr(model, "language_model") else model.model.language_model
    if hasattr(inside, "lm_head"):
        inside.load_state_dict(text.state_dict())
    else:
        inside.load_state_dict(text.model.state_dict())
        model.lm_head.load_state_dict(text.lm_head.state_dict())


def prompts(
    wrapper: str, model: Any, processor: Any, image: dict[str, int]
) -> tuple[list[tiny_models.Served], list[list[int]], list[dict[str, int] | None]]:
    """Transformers' inputs for each prompt (``tiny_models.Served``), the ids vLLM is given, and each
    prompt's picture (or None): ``tiny_models.PROMPTS``' first text only, its second after ``image``
    (``synthetic_image``'s arguments)."""
    import torch

    tiny = WRAPPERS[wrapper]
    text_prompt, image_prompt = tiny_models.PROMPTS[:2]
    words = " ".join(f"w{i}" for i in image_prompt)
    text = f"{SPECIAL_WORDS[IMAGE_TOKEN]} {words}" if tiny.placeholder_given else words
    image_inputs = processor(text=text, images=[synthetic_image(**image)], return_tensors="pt")
    # one unpadded prompt; no training mask; token types for the prompt only (``TinyWrapper.token_types``)
    for text_only in ("attention_mask", "token_type_ids", "labels", "mm_token_type_ids"):
        image_inputs.pop(text_only, None)
    served = [(tiny.text_only(model), {"input_ids": torch.tensor([text_prompt])}), (model, dict(image_inputs))]
    given = [list(text_prompt), [IMAGE_TOKEN, *image_prompt] if tiny.placeholder_given else list(image_prompt)]
    return served, given, [None, image]


def suitable_image(wrapper: str, model: Any, processor: Any, layer_ids: Sequence[int]) -> dict[str, int]:
    """The first picture of ``IMAGE_SEEDS`` after which the random target neither ends early, nor produces
    token 0 or the image placeholder (which transformers would then take for a second picture)."""
    refusals = []
    for seed in IMAGE_SEEDS:
        image = {"size": IMAGE_SIZE, "seed": seed}
        try:
            served = prompts(wrapper, model, processor, image)[0]
            tiny_models.usable_reference(model, layer_ids, served, forbidden=(IMAGE_TOKEN,))
        except (AssertionError, ValueError) as refusal:  # ValueError: transformers counting placeholders
            refusals.append(f"{seed}: {refusal}")
            continue
        return image
    raise AssertionError(f"no picture suits this target: {refusals}")


def build_all(
    directory: Path, layer_id_sets: Mapping[str, Sequence[int]], num_layers: int, wrapper: str
) -> dict[str, Any]:
    """The wrapped target, its drafters for each id set (``tiny_models.build_drafters``) and the reference."""
    model, processor = build_target(directory / "target", wrapper, num_layers)
    image = suitable_image(wrapper, model, processor, layer_id_sets["default"])
    served, given, images = prompts(wrapper, model, processor, image)
    summary = {
        "target": str(directory / "target"),
        "family": wrapper,
        "architecture": WRAPPERS[wrapper].architecture,
        "num_layers": num_layers,
        "prompts": [prompt["input_ids"][0].tolist() for _, prompt in served],
        "engine_prompts": given,
        "images": images,
        "sets": tiny_models.build_drafters(directory, model, layer_id_sets, served, forbidden=(IMAGE_TOKEN,)),
    }
    return summary

"""What ``doctor`` found, as facts: which check (``CheckName``), its verdict, what it found (one dataclass per
check, the names and numbers involved) and the fix (a ``Remedy``, or a command with its values); the checks in
``doctor.py`` decide on them, and ``render/doctor_words.py`` says them."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ..eagle3.drafter_id_fields import IdsRead
from ..eagle3.methods import Method
from ..eagle3.native_ids import NativeDefault
from ..eagle3.release import GpuDefault, Lookup
from ..plan import FilePlan, Plan
from .drafter_config import Convention, DrafterIds, Inference
from .target_model import TargetModel

LLAMA_DRAFTER = "Eagle3LlamaForCausalLM"
NATIVE_MLA_DRAFTERS = "vllm>=0.18.0"
"""The requirement that installs a vLLM loading MLA (DeepSeek) drafters."""


class CheckName(enum.Enum):
    """Which check a finding answers: the name ``doctor`` and ``doctor --json`` give it."""

    RELEASE = "vLLM"
    ARCHITECTURE = "architecture"
    HIDDEN_SIZE = "hidden size"
    VOCABULARY = "vocabulary"
    DRAFT_VOCABULARY = "draft vocabulary"
    IDS = "ids"
    CONVENTION = "convention"
    LAYERS = "layers"
    PIPELINE = "pipeline"


class Assessment(str, enum.Enum):
    OK = "ok"
    PROBLEM = "problem"
    UNKNOWN = "unknown"
    """Not known to be consistent: counts against the exit status like a problem."""
    NOTE = "note"
    """A fact worth knowing that decides nothing."""


# --------------------------------------------------------------------------- what a check found


class Serving(enum.Enum):
    """What the release finding found decides whether this install serves the target with EAGLE-3."""

    THE_FILES = "the files"
    """An unfinished run, modified files, or files no target can use: the plan's reason says why."""
    NO_TARGET = "no target"
    """No target given: its class and model type decide."""
    THE_TARGET = "the target"
    """The target's verdict, with the reason of a file on its path this tool cannot patch."""
    ITS_OWN_CLASS = "its own class"
    """The release does not register the target: its own model class decides."""


@dataclass(frozen=True)
class ReleaseFacts:
    """The release finding's facts."""

    serving: Serving
    plan: Plan
    model: Optional[TargetModel] = None
    unrecognised: Optional[FilePlan] = None
    """A file on the target's path this tool cannot patch."""


class Loading(enum.Enum):
    """Whether this release loads the drafter's architecture, and by which rule."""

    SPECULATORS_FORMAT = "speculators format"
    """vLLM converts a speculators-format config itself: not checked."""
    NO_ARCHITECTURES = "no architectures"
    NO_EAGLE3_DRAFTER = "no EAGLE-3 drafter"
    """The release loads no EAGLE-3 drafter at all."""
    FIXED = "fixed"
    """The release builds its one drafter class whatever the config names."""
    REGISTERED = "registered"
    """The name the lookup makes of it is in the registry."""
    NOT_REGISTERED = "not registered"
    MLA_ON_FIXED = "MLA on fixed"
    """An MLA drafter where the release builds the Llama one whatever the config names."""
    NO_SUCH_METHOD = "no such method"
    """The drafter is another method's (DFlash, DSpark), which this release does not have."""
    EXTRACTION = "extraction"
    """No drafter: ``extract_hidden_states`` saves the states (``doctor --target`` alone)."""


@dataclass(frozen=True)
class ArchitectureFacts:
    loading: Loading
    architecture: Optional[str] = None
    loaded: Optional[str] = None
    """The class the lookup makes of the architecture."""
    lookup: Optional[Lookup] = None
    method: Optional[Method] = None
    """The method the drafter is for, where it is not EAGLE-3 (``methods.drafter_method``)."""


class Sizes(enum.Enum):
    """A size the drafter was trained with against the target's."""

    MISSING = "missing"
    DIFFER = "differ"
    SAME = "same"


@dataclass(frozen=True)
class SizeFacts:
    sizes: Sizes
    drafter_key: str
    target_key: str
    expects: Optional[int] = None
    actual: Optional[int] = None


@dataclass(frozen=True)
class NeedsTarget:
    """The check compares the drafter with the target, and no target was given."""


class DraftMap(enum.Enum):
    """Whether the drafter drafts over a smaller vocabulary, and whether its checkpoint maps it."""

    WHOLE_VOCABULARY = "whole vocabulary"
    EXCEEDS_VOCABULARY = "exceeds vocabulary"
    UNCHECKED = "unchecked"
    """No safetensors header to read the map's shape from."""
    NO_MAP = "no map"
    """The checkpoint has no d2t tensor, or one of another shape."""
    MAPPED = "mapped"


@dataclass(frozen=True)
class DraftVocabularyFacts:
    draft_map: DraftMap
    draft: Optional[int] = None
    vocabulary: Optional[int] = None
    d2t: Optional[list[int]] = None
    """The shape of the checkpoint's d2t tensor (None: it has none)."""


@dataclass(frozen=True)
class RunnerRead:
    """What one GPU runner of the release takes from the drafter's config."""

    runner: str
    """The runner's file (``eagle3/release.py``: its call site of the setter)."""
    read: Optional[IdsRead]
    """The field it takes ids from and the ids it uses (None: it finds none and asks the target's getter)."""
    readable: bool = True
    """False: its code reads ids in a way this tool cannot follow."""
    default: bool = False
    """The runner a GPU user gets for this target by default."""

    @property
    def used(self) -> object:
        """What decides the layers: its ids, the target's getter (None), or "unreadable"."""
        return (self.read.used if self.read is not None else None) if self.readable else "unreadable"


@dataclass(frozen=True)
class IdsFacts:
    """Where the drafter config keeps its ids, and which of this release's runners read them, and where."""

    ids: DrafterIds
    read: bool
    """The runner a GPU user gets (or every runner, where that cannot be told) takes the drafter's ids."""
    runners: tuple[RunnerRead, ...] = ()
    choice: Optional[GpuDefault] = None


@dataclass(frozen=True)
class ConventionFacts:
    """The convention the drafter's ids are in (None: the drafter names no ids)."""

    inference: Optional[Inference]


class Capture(enum.Enum):
    """Where the ids vLLM will capture come from, or why they are not known."""

    DRAFTER_TOP_LEVEL = "drafter top level"
    """The drafter's ids, which this release's runner reads (``CaptureSource.read``: the field, the shift)."""
    RUNNERS_DIFFER = "runners differ"
    """The release's two GPU runners take other layers from this drafter, and this tool cannot tell which serves."""
    NO_LAYER_COUNT = "no layer count"
    NO_TARGET_CONFIG = "no target config"
    NOT_A_FAMILY = "not a family"
    """Neither a family this tool patches nor a class with EAGLE-3."""
    BAKED_IN = "baked in"
    """``apply --aux-layers``."""
    PATCHED_DEFAULT = "patched default"
    PATCHED_DEFAULT_ONCE_APPLIED = "patched default once applied"
    INSTALL_STATE = "install state"
    """The install's state leaves it open."""
    UNREADABLE_GETTER = "unreadable getter"
    """The target's own class chooses, by a getter this tool cannot read."""
    UNEVALUATED_DEFAULT = "unevaluated default"
    """The target's own getter, which this tool cannot evaluate."""
    OWN_DEFAULT = "own default"


@dataclass(frozen=True)
class CaptureSource:
    capture: Capture
    read: Optional[RunnerRead] = None
    """``Capture.DRAFTER_TOP_LEVEL``: the runner and what it reads."""
    runners: tuple[RunnerRead, ...] = ()
    """``Capture.RUNNERS_DIFFER``: what each runner takes."""
    architecture: str = ""
    """``Capture.UNREADABLE_GETTER``: the target's."""
    default: Optional[NativeDefault] = None
    """The target's own getter, as written upstream."""


class LayersFound(enum.Enum):
    """What vLLM will capture against what the drafter was trained on."""

    CAPTURE_UNKNOWN = "capture unknown"
    BEYOND_THE_TARGET = "beyond the target"
    """Ids past the target's last layer."""
    OTHER_COUNT = "other count"
    """Another number of hidden states than the drafter's fc takes."""
    UNDECIDED_DEFAULT = "undecided default"
    """The drafter names no ids, and the common default repeats ids for this layer count."""
    UNDECIDED_CONVENTION = "undecided convention"
    OTHER_LAYERS = "other layers"
    SAME_LAYERS = "same layers"
    FIRST_LAYER = "first layer"
    """Id 0, which the target's decoder (vLLM's own) cannot capture (``LayersFacts.trap``)."""
    LAST_LAYER = "last layer"
    """Id n, which the target's decoder (vLLM's own) never reaches (``LayersFacts.trap``)."""
    SAVED = "saved"
    """``extract_hidden_states``: the layers it will save (no drafter to compare with)."""


@dataclass(frozen=True)
class LayersFacts:
    found: LayersFound
    source: CaptureSource
    captured: tuple[int, ...] = ()
    expected: tuple[int, ...] = ()
    """The ids the drafter was trained on."""
    layers: Optional[int] = None
    """The target's layer count."""
    fc_states: Optional[int] = None
    """How many hidden states the drafter's fc takes."""
    candidates: tuple[tuple[Convention, tuple[int, ...]], ...] = ()
    """``LayersFound.UNDECIDED_CONVENTION``: the vLLM ids the drafter's ids name in each convention."""
    trap: Optional[str] = None
    """``LayersFound.FIRST_LAYER`` or ``LAST_LAYER`` (and a warning with ``SAVED``): ``path:line`` of the capture that
    fails at id 0, or never reaches id n."""
    last_layer: bool = False
    """``SAVED``: ``trap`` is where id n is never reached (else where id 0 fails)."""


class Carrying(enum.Enum):
    """Whether vLLM carries the aux states of earlier pipeline ranks for the target."""

    ONE_STAGE = "one stage"
    """The release refuses an EAGLE drafter over pipeline ranks (before 0.30.0)."""
    ASK_THE_TARGET = "ask the target"
    """The release carries them for targets that declare it; no target given."""
    CARRIED = "carried"
    NOT_CARRIED = "not carried"


@dataclass(frozen=True)
class PipelineFacts:
    carrying: Carrying
    architecture: str = ""


Found = Union[
    ReleaseFacts,
    ArchitectureFacts,
    SizeFacts,
    NeedsTarget,
    DraftVocabularyFacts,
    IdsFacts,
    ConventionFacts,
    LayersFacts,
    PipelineFacts,
]


# --------------------------------------------------------------------------- the fix


class Remedy(enum.Enum):
    """A fix that needs no values beyond the install and the drafter."""

    APPLY = "apply"
    REVERT_THEN_APPLY = "revert then apply"
    """Restore vLLM's files changed since apply, then apply again."""
    GIVE_THE_TARGET = "give the target"
    UPGRADE_VLLM = "upgrade vLLM"
    """To a vLLM that loads MLA drafters."""
    UPGRADE_FOR_MLA_DRAFTER = "upgrade for MLA drafter"
    """The same, for an MLA drafter this release cannot load."""
    NONE_FROM_THIS_TOOL = "none from this tool"
    REGISTERED_DRAFTER = "registered drafter"
    """A drafter whose architecture this release registers."""
    TRAINED_DRAFTER = "trained drafter"
    """The drafter trained for this target."""
    INTACT_CHECKPOINT = "intact checkpoint"
    CHOOSE_CONVENTION = "choose convention"
    """``apply --aux-layers-from`` the drafter, with the convention it was trained in."""
    NEWER_VLLM_FOR_METHOD = "newer vLLM for method"
    """A vLLM that has the drafter's method (``ArchitectureFacts.method``)."""
    NOT_LAYER_ZERO = "not layer zero"
    NOT_LAYER_N = "not layer n"
    """Ids without 0: vLLM's own decoder cannot capture it."""


@dataclass(frozen=True)
class SetDrafterConfig:
    """Set one top-level key of the drafter's ``config.json``."""

    path: Path
    key: str
    value: list[object]


@dataclass(frozen=True)
class ApplyAuxLayers:
    """``apply --aux-layers`` with these ids."""

    ids: tuple[int, ...]


Fix = Union[Remedy, SetDrafterConfig, ApplyAuxLayers]


@dataclass(frozen=True)
class Finding:
    check: CheckName
    verdict: Assessment
    found: Found
    fix: Optional[Fix] = None

"""Which drafter-config fields a runner reads EAGLE-3 aux layer ids from, read by structure: on small look-alike
functions written here (no vLLM code), then on the real runners of a few releases."""

from __future__ import annotations

import textwrap

import pytest
from helpers.wheel_corpus import release_tree

from vllm_eagle3_patch.eagle3.drafter_id_fields import IdField, id_fields
from vllm_eagle3_patch.eagle3.release import RELAY, RUNNER

AUX = "eagle_aux_hidden_state_layer_ids"
DEEPSEEK_V41 = 'getattr(hf_config, "model_type", None) == "deepseek_v41"'


def read(source: str):
    return id_fields(textwrap.dedent(source))


@pytest.mark.unit
def test_the_top_level_field_behind_a_hasattr_gate():
    """The shape up to 0.19.x: an early ``return None`` when the field is missing, then the field as is."""
    assert read(
        """
        def aux_layers(spec):
            if not spec.draft:
                return None
            cfg = spec.draft.hf_config
            if not hasattr(cfg, "eagle_aux_hidden_state_layer_ids"):
                return None
            ids = cfg.eagle_aux_hidden_state_layer_ids
            if ids and isinstance(ids, (list, tuple)):
                return tuple(ids)
            return None
        """
    ) == (IdField((AUX,)),)


@pytest.mark.unit
def test_a_nested_dict_read_only_when_nothing_was_found_comes_second_with_its_shift():
    source = """
        def aux_layers(hf_config):
            ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)
            if not ids:
                nested = getattr(hf_config, "flash_config", None)
                if nested and isinstance(nested, dict):
                    ids = {read}
            if ids:
                return tuple(ids)
            return None
        """
    as_is = read(source.format(read='nested.get("target_layer_ids")'))
    assert as_is == (IdField((AUX,)), IdField(("flash_config", "target_layer_ids")))
    shifted = read(source.format(read='[i + 1 for i in (nested["target_layer_ids"] or [])]'))
    assert shifted == (IdField((AUX,)), IdField(("flash_config", "target_layer_ids"), shift=1))
    assert shifted[1].name == "flash_config.target_layer_ids"


@pytest.mark.unit
def test_a_later_block_that_assigns_whenever_its_dict_is_there_overrides_an_earlier_one():
    """Two ``if <dict is there>:`` blocks in a row: the second assignment wins, so it comes first."""
    assert read(
        """
        def aux_layers(hf_config):
            ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)
            if not ids:
                first = getattr(hf_config, "first_config", None)
                second = getattr(hf_config, "second_config", None)
                if first:
                    ids = [i + 1 for i in first.get("layer_ids", [])]
                if second is not None:
                    ids = second.get("eagle_aux_hidden_state_layer_ids")
            if ids and isinstance(ids, list):
                return tuple(ids)
        """
    ) == (
        IdField((AUX,)),
        IdField(("second_config", AUX)),
        IdField(("first_config", "layer_ids"), shift=1),
    )


@pytest.mark.unit
def test_a_loop_over_names_expands_to_one_field_per_name():
    source = """
        def aux_layers(hf_config):
            ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)
            if not ids:
                for name in ("one_config", "two_config"):
                    nested = getattr(hf_config, name, None)
                    if nested and isinstance(nested, dict):
                        ids = nested.get("layer_ids")
                        {stop}
            if ids:
                return tuple(ids)
        """
    first_found = read(source.format(stop="if ids:\n                            break"))
    assert first_found == (IdField((AUX,)), IdField(("one_config", "layer_ids")), IdField(("two_config", "layer_ids")))
    last_wins = read(source.format(stop="pass"))
    assert last_wins == (IdField((AUX,)), IdField(("two_config", "layer_ids")), IdField(("one_config", "layer_ids")))


@pytest.mark.unit
@pytest.mark.parametrize(
    ("then", "other", "expected"),
    [
        ("list(spark)", "[i + 1 for i in spark]", IdField(("spark_layer_ids",), 1, 'cfg.model_type == "v9"')),
        ("[i + 1 for i in spark]", "list(spark)", IdField(("spark_layer_ids",), 1, 'cfg.model_type != "v9"')),
    ],
)
def test_a_comparison_that_only_drops_the_shift_is_recorded_as_its_condition(then, other, expected):
    assert read(
        f"""
        def aux_layers(cfg):
            ids = getattr(cfg, "eagle_aux_hidden_state_layer_ids", None)
            if not ids:
                spark = getattr(cfg, "spark_layer_ids", None)
                if spark:
                    if cfg.model_type == "v9":
                        ids = {then}
                    else:
                        ids = {other}
            if ids:
                return tuple(ids)
        """
    ) == (IdField((AUX,)), expected)


@pytest.mark.unit
@pytest.mark.parametrize(
    "assignment",
    [
        "ids = compute(hf_config)",  # not a field read
        "ids = getattr(hf_config, 'aux_layers', None)",  # a field that does not end in layer_ids
        "ids = sorted(hf_config.extra_layer_ids)",  # a read, reordered
        "ids = [2 * i for i in hf_config.extra_layer_ids]",  # a shift that is not an addition
        "ids = hf_config.extra_layer_ids if hf_config.model_type == 'x' else None",
    ],
)
def test_an_id_read_this_reader_cannot_follow_is_unknown(assignment):
    assert (
        read(
            f"""
            def aux_layers(hf_config):
                ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)
                if not ids:
                    {assignment}
                if ids:
                    return tuple(ids)
                return None
            """
        )
        is None
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    "source",
    [
        # a comparison choosing between two fields, not between two shifts
        """
        def aux_layers(cfg):
            if cfg.model_type == "a":
                ids = cfg.eagle_aux_hidden_state_layer_ids
            else:
                ids = cfg.other_layer_ids
            return tuple(ids)
        """,
        # a field consulted only once another is present (but empty): not an order of precedence
        """
        def aux_layers(cfg):
            if not hasattr(cfg, "eagle_aux_hidden_state_layer_ids"):
                return None
            ids = cfg.eagle_aux_hidden_state_layer_ids
            if not ids:
                ids = cfg.other_layer_ids
            return tuple(ids)
        """,
        # ids read, handed on rather than returned
        """
        def aux_layers(cfg, model):
            model.set_aux(getattr(cfg, "eagle_aux_hidden_state_layer_ids", None))
        """,
        # a return inside a loop
        """
        def aux_layers(cfg):
            for name in ("a_config", "b_config"):
                nested = getattr(cfg, name, {})
                found = nested.get("eagle_aux_hidden_state_layer_ids")
                if found:
                    return tuple(found)
        """,
        "def broken(:\n    eagle_aux_hidden_state_layer_ids",
    ],
)
def test_shapes_left_unknown(source):
    assert read(source) is None


@pytest.mark.unit
def test_a_file_that_reads_no_ids_from_the_drafter_reads_none():
    assert read("def aux_layers(model):\n    return model.default_layers()\n") == ()


@pytest.mark.unit
def test_early_returns_in_order_and_a_config_held_by_self():
    assert read(
        """
        class Runner:
            def unrelated(self):
                return 1

            def aux_layers(self):
                top = self.hf_config.eagle_aux_hidden_state_layer_ids
                if top:
                    return tuple(top)
                nested = self.hf_config.eagle_config or {}
                if nested:
                    return tuple(i + 1 for i in nested["eagle_aux_hidden_state_layer_ids"])
                return tuple(getattr(self.hf_config, "x_layer_ids", None) or getattr(self.hf_config, "y_layer_ids"))
        """
    ) == (
        IdField((AUX,)),
        IdField(("eagle_config", AUX), shift=1),
        IdField(("x_layer_ids",)),
        IdField(("y_layer_ids",)),
    )


@pytest.mark.unit
def test_the_first_function_reading_the_field_is_read_and_a_nested_first_read_finds_the_config():
    assert read(
        """
        def aux_layers(draft):
            cfg = draft.hf_config
            eagle = getattr(cfg, "eagle_config", None)
            ids = None
            if isinstance(eagle, dict):
                ids = eagle.get("eagle_aux_hidden_state_layer_ids")
            if not ids:
                ids = cfg.eagle_aux_hidden_state_layer_ids
            if ids:
                return tuple(ids)

        def later(cfg):
            return cfg.other_layer_ids if cfg.eagle_aux_hidden_state_layer_ids else None
        """
    ) == (IdField(("eagle_config", AUX)), IdField((AUX,)))  # ``later`` would be unknown: not read


DFLASH_AS_IS = IdField(("dflash_config", "target_layer_ids"))
"""0.21.0's V1 runner takes DFlash's ids as they are; 0.22.0 on, both runners add 1."""
V1_FROM_0_22 = (IdField((AUX,)), IdField(("eagle_config", AUX)), IdField(("dflash_config", "target_layer_ids"), 1))
"""The second assignment overrides the first whenever ``eagle_config`` is a dict, so it ranks above DFlash's."""
V2_FROM_0_30 = (
    IdField((AUX,)),
    IdField(("dflash_config", "target_layer_ids"), 1),
    IdField(("dspark_target_layer_ids",), 1, DEEPSEEK_V41),
    IdField(("target_layer_ids",), 1),
    IdField(("dflash_config", "layer_ids")),
    IdField(("eagle_config", "layer_ids")),
)


@pytest.mark.parametrize(
    ("version", "runner", "expected"),
    [
        pytest.param("0.17.1", RUNNER, (IdField((AUX,)),), id="0.17.1-V1"),
        pytest.param("0.17.1", RELAY, (IdField((AUX,)),), id="0.17.1-V2"),
        pytest.param("0.21.0", RUNNER, (IdField((AUX,)), DFLASH_AS_IS), id="0.21.0-V1"),
        pytest.param("0.21.0", RELAY, (IdField((AUX,)),), id="0.21.0-V2"),
        pytest.param("0.22.0", RUNNER, V1_FROM_0_22, id="0.22.0-V1"),
        pytest.param("0.33.0", RUNNER, V1_FROM_0_22, id="0.33.0-V1"),
        pytest.param("0.33.0", RELAY, V2_FROM_0_30, id="0.33.0-V2"),
        pytest.param("0.34.0", RELAY, V2_FROM_0_30, id="0.34.0-V2"),
    ],
)
def test_the_real_runners(version, runner, expected):
    """Read by eye from each file: 0.21.0's V1 takes DFlash's ids as they are, 0.22.0 on add 1; V1 and V2 of
    one release read different fields (0.21.0, 0.33.0)."""
    source = (release_tree(version) / "vllm" / runner).read_text(encoding="utf-8")
    assert id_fields(source) == expected


@pytest.mark.parametrize(
    ("version", "mixtral", "qwen3"),
    [
        ("0.21.0", RUNNER, RUNNER),  # V1 unless VLLM_USE_V2_MODEL_RUNNER=1
        ("0.22.0", RUNNER, RELAY),  # the listed (Qwen3ForCausalLM) on V2, every other on V1
        ("0.24.0", RUNNER, RELAY),  # the same; from 0.25.0 an unlisted model's config decides (None: cannot tell)
        ("0.29.0", RELAY, RELAY),
        ("0.34.0", RELAY, RELAY),  # the only GPU runner
    ],
)
def test_the_runner_a_gpu_user_gets(version, mixtral, qwen3):
    from vllm_eagle3_patch.eagle3.release import Release

    release = Release(release_tree(version) / "vllm")
    assert (release.gpu_runner("MixtralForCausalLM"), release.gpu_runner("Qwen3ForCausalLM")) == (mixtral, qwen3)

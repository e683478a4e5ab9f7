#!/usr/bin/env bash
# Show vllm-eagle3-patch on a real vLLM release in a throwaway virtual environment:
# status -> diff -> apply -> status --check -> verify -> revert -> status.
# Usage: bash examples/demo.sh [VLLM_VERSION]   (default 0.17.1; nothing outside /tmp is touched)
set -euo pipefail
version="${1:-0.17.1}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
demo="$(mktemp -d /tmp/vllm-eagle3-demo.XXXXXX)"
trap 'rm -rf "$demo"' EXIT

step() { if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then printf '\n\033[1m$ %s\033[0m\n' "$*"; else printf '\n$ %s\n' "$*"; fi; }

python3 -m venv "$demo/tool" && "$demo/tool/bin/pip" install --quiet "$repo"
python3 -m venv "$demo/serving" && "$demo/serving/bin/pip" install --quiet --no-deps "vllm==$version"
tool="$demo/tool/bin/vllm-eagle3-patch"
target=(--python "$demo/serving/bin/python")

step vllm-eagle3-patch "${target[@]}" status
"$tool" "${target[@]}" status
step vllm-eagle3-patch "${target[@]}" diff
"$tool" "${target[@]}" diff
step vllm-eagle3-patch "${target[@]}" apply
"$tool" "${target[@]}" apply
step vllm-eagle3-patch "${target[@]}" status --check
"$tool" "${target[@]}" status --check
step vllm-eagle3-patch "${target[@]}" verify   "# no torch in this demo venv: static checks; with torch it runs the code"
"$tool" "${target[@]}" verify
step vllm-eagle3-patch "${target[@]}" apply   "# again: nothing to do"
"$tool" "${target[@]}" apply
step vllm-eagle3-patch "${target[@]}" revert
"$tool" "${target[@]}" revert
step vllm-eagle3-patch "${target[@]}" status
"$tool" "${target[@]}" status

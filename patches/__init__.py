"""The codemods: one module per kind of change this tool makes to vLLM's files.

Each module holds a LibCST codemod (a class with ``transform_module``) and the patch that
judges a file with it; ``vllm_eagle3_patch.catalog`` lists the patches.
"""

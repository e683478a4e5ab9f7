"""One module per vLLM place this tool patches; each exposes ``TARGET`` (see ``target.Target``).

Adding support for a new vLLM file means adding a module here: the engine finds them all.
"""

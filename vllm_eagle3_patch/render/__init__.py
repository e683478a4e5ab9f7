"""Every word a user reads: the text of each command (``text.py``) and its ``--json`` object
(``json_objects.py``), built from what the layers below return."""

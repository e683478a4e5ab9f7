"""Every word a user reads: the text of each command (``text.py``) and its ``--json`` object
(``json_objects.py``), built from what the layers below return, in the words of ``plan_words.py``,
``words.py``, ``messages.py`` and ``doctor_words.py``."""

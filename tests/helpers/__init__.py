"""What the outer suite's tests share, apart from the tests themselves: no module here is collected, and no
test imports another test module (``tests/`` is on ``sys.path``: ``from helpers import wheel_corpus``)."""

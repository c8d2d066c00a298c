"""raylog's Ray actors: partition replicas and the controller (groups come in a later issue).

Each actor is a thin shell around a plain state class (``*_state.py``) that
unit tests drive without Ray.
"""

"""QPOLICY ... RETAIN: a queue's acknowledged jobs kept on disk (segments.py, store.py)
for REPLAY and RETAINED."""

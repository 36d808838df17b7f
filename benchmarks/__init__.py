"""Benchmarks of lfa-index on the real data of the shared data folder (``--data DIR`` or
``$LFA_SHARED_DATA``; not part of the installed package).

``benchmarks.data`` loads the few-shot sets, ``benchmarks.baselines`` holds the methods LFA is
compared against, and ``benchmarks.accuracy`` runs the top-1 accuracy table.
"""

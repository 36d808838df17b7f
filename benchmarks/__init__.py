"""Benchmarks of lfa-index on the real data in /work/shared/data (not part of the installed package).

``benchmarks.data`` loads the few-shot sets, ``benchmarks.baselines`` holds the methods LFA is
compared against, and ``benchmarks.accuracy`` runs the top-1 accuracy table.
"""

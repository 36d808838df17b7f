"""The torch side of LFA: every module here imports torch, and nothing outside ``core/solvers/``
in ``core/`` does at import time, so serving a fitted estimator needs no torch.

:func:`~.supervised.solve_supervised` and :func:`~.unsupervised.solve_unsupervised` turn
L2-normalised tensors and the options the estimator built into one
:class:`~lfa_index.core.state.FittedState`.
"""

"""The math of LFA: Procrustes, the ARerank loss, refinement, Sinkhorn, projection, the estimator."""

from .estimator import LFA
from .video import max_pool_frames

__all__ = ["LFA", "max_pool_frames"]

"""AlignedIndex: an LFA estimator served as exact inner-product search in FAISS, one job per module.

``folding``    scores and rankings of folded class vectors, the exact re-rank (also used by the stores and
               integrations); the query map itself is :class:`lfa_index.core.query_map.QueryMap`
``labels``     :class:`LabelSpace`: class labels ↔ positions, the unknown label, rejection
``calibration`` rejection thresholds: held-out scores of the support rows, the quantile
``classes``    the classes as one immutable snapshot, searched in flat inner-product indexes
``corpus``     the FAISS side of an aligned corpus: its index, ids and read/write lock
``device``     FAISS placement (GPU)
``export``     what a fitted index hands to other stores (folded prototypes, prepared queries, maps)
``format``     what the index saves and loads
``aligned_index``  the :class:`AlignedIndex` estimator that composes them
``aligned_corpus`` :class:`AlignedCorpus`: images aligned by a fitted index, searched by text or image
                   (``corpus_format``: what it saves)
``aligner``    :class:`EmbeddingAligner`: a new encoder's queries in an old encoder's space (``aligner_format``)

Example
-------
>>> index = AlignedIndex(lfa=LFA(steps=50, random_state=0)).fit(X, y, text_emb, class_names)
>>> index.predict(queries)                      # class names
>>> scores, names = index.search(queries, k=5)  # top-5 classes, aligned cosines
>>> index.save("my_index"); AlignedIndex.load("my_index")
>>> corpus = AlignedCorpus(index).add(corpus_emb)   # text -> image, image -> image
>>> corpus.search_text(text_emb, k=10); corpus.save("my_index.corpus")
"""

from .aligned_corpus import AlignedCorpus
from .aligned_index import AlignedIndex
from .aligner import EmbeddingAligner
from .faiss_device import faiss_gpu_available
from .labels import LabelSpace

__all__ = ["AlignedCorpus", "AlignedIndex", "EmbeddingAligner", "LabelSpace", "faiss_gpu_available"]

"""Framework integrations: an AlignedIndex behind LangChain and LlamaIndex embedding interfaces.

Import the module of the framework you use; neither framework is imported by ``import lfa_index``
or by this package:

- :mod:`lfa_index.integrations.langchain`: ``LFAEmbeddings``, ``search_aligned_documents``,
  ``classify_documents`` (``pip install 'lfa-index[langchain]'``);
- :mod:`lfa_index.integrations.llamaindex`: ``LFAEmbedding``, ``retrieve_aligned``,
  ``classify_nodes`` (``pip install 'lfa-index[llamaindex]'``).

Both give a framework's vector store aligned search: documents keep the document-side model's raw
embeddings, and text queries are mapped into that space by the index's query map.
"""

from ._common import AlignedEmbedder

__all__ = ["AlignedEmbedder"]

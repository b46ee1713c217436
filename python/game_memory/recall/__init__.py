"""The recall pipeline: snapshot -> lexical + vector candidates -> fusion -> game-time reranker.

Functions over explicit collaborators (the store, the index, the embedding gate, options);
nothing here knows which backend it is given.
"""
